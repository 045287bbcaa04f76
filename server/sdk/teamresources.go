package sdk

// TeamResourceBundle is a workspace's shared project configuration: files
// under the project config directory (.reeve/) that `reeve team-resource
// sync` writes into a repository and commits. Each file carries its
// SHA-256 so that the receiver checks it before writing anything.
type TeamResourceBundle struct {
	Workspace string             `json:"workspace,omitempty"`
	Resource  string             `json:"resource,omitempty"` // which set of resources, e.g. "default"
	Version   string             `json:"version,omitempty"`  // the bundle's revision on the server
	Files     []TeamResourceFile `json:"files"`
}

// TeamResourceFile is one file of a bundle.
type TeamResourceFile struct {
	Path          string `json:"path"`           // slash-separated, relative to the repository, under .reeve/
	SHA256        string `json:"sha256"`         // hex SHA-256 of the content
	ContentBase64 string `json:"content_base64"` // the content, standard base64
}

// TeamResourceSyncReceipt is what a machine reports after it wrote a
// bundle into a repository: which version landed in which commit.
type TeamResourceSyncReceipt struct {
	Resource string `json:"resource"`
	Version  string `json:"version,omitempty"`
	Commit   string `json:"commit,omitempty"` // empty with --no-commit or when nothing changed
	Repo     string `json:"repo,omitempty"`   // the repository's name (its directory), not its path
	Executor string `json:"executor,omitempty"`
	Files    int    `json:"files"`
}
