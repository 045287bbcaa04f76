// Command reeve runs coding agents under governance: the local daemon, its
// command line, and the hosted control plane (`reeve server`).
package main

import (
	"os"

	"reeve.dev/reeve/cli"
)

func main() {
	os.Exit(cli.Main(programs()))
}
