package cli

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"

	"reeve.dev/reeve/internal/version"
)

type versionOptions struct {
	env  *Env
	json bool
}

// versionInfo is the stable --json shape of `reeve version`.
type versionInfo struct {
	Version   string `json:"version"`
	GoVersion string `json:"go_version"`
	OS        string `json:"os"`
	Arch      string `json:"arch"`
}

func newVersionCmd(env *Env) *cobra.Command {
	opts := &versionOptions{env: env}
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the reeve version",
		Args:  noArgs,
		RunE:  func(*cobra.Command, []string) error { return runVersion(opts) },
	}
	cmd.Flags().BoolVar(&opts.json, "json", false, "print as JSON")
	return cmd
}

func runVersion(opts *versionOptions) error {
	info := versionInfo{Version: version.Version, GoVersion: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}
	if opts.json {
		return writeJSON(opts.env.Out, info)
	}
	_, err := fmt.Fprintf(opts.env.Out, "reeve %s (%s %s/%s)\n", info.Version, info.GoVersion, info.OS, info.Arch)
	return err
}
