package store

import (
	"context"
	"time"
)

// Stored workflow definitions (docs/workers.md): a workspace's named
// workflows, each a list of immutable versions. A run names a definition
// (its latest version) or one version, and runs that version's YAML.

// WorkflowDefinition is a named workflow; LatestVersion is the number of
// its newest version.
type WorkflowDefinition struct {
	ID, WorkspaceID, Name, Description string
	LatestVersion                      int64
	CreatedBy                          string
	CreatedAt, UpdatedAt               time.Time
}

// WorkflowDefinitionVersion is one version: its YAML and the YAML's
// digest, never changed once written.
type WorkflowDefinitionVersion struct {
	ID, DefinitionID, WorkspaceID string
	Version                       int64
	YAML, Digest                  string
	CreatedBy                     string
	CreatedAt                     time.Time
}

// WorkflowDefinitions is the stored-definition part of the store.
type WorkflowDefinitions interface {
	// CreateWorkflowDefinition writes d with its first version v (numbered
	// 1). ErrConflict when the workspace has a definition of that name.
	CreateWorkflowDefinition(ctx context.Context, d *WorkflowDefinition, v *WorkflowDefinitionVersion, audit AuditEntry) error
	WorkflowDefinition(ctx context.Context, workspaceID, id string) (WorkflowDefinition, error)
	// WorkflowDefinitions lists a workspace's definitions by name.
	WorkflowDefinitions(ctx context.Context, workspaceID string) ([]WorkflowDefinition, error)
	// AddWorkflowDefinitionVersion numbers v after the definition's latest
	// version and writes it, in one transaction. When v's digest is the
	// latest version's, nothing is written: the latest version is returned
	// with created=false (adding the same YAML twice is one version).
	AddWorkflowDefinitionVersion(ctx context.Context, workspaceID, definitionID string, v WorkflowDefinitionVersion, audit AuditEntry) (WorkflowDefinitionVersion, bool, error)
	// WorkflowDefinitionVersions lists a definition's versions, oldest first.
	WorkflowDefinitionVersions(ctx context.Context, workspaceID, definitionID string) ([]WorkflowDefinitionVersion, error)
	// WorkflowDefinitionVersion reads one version by its id.
	WorkflowDefinitionVersion(ctx context.Context, workspaceID, id string) (WorkflowDefinitionVersion, error)
	// LatestWorkflowDefinitionVersion reads a definition's newest version.
	LatestWorkflowDefinitionVersion(ctx context.Context, workspaceID, definitionID string) (WorkflowDefinitionVersion, error)
	// DeleteWorkflowDefinition removes a definition with all its versions
	// and returns what it removed. ErrNotFound when the workspace has no
	// such definition; ErrConflict, naming them, while runs that have not
	// finished (any status but succeeded, failed or cancelled) name it.
	// Finished runs keep their copy of the YAML and its digest.
	DeleteWorkflowDefinition(ctx context.Context, workspaceID, id string, audit AuditEntry) (WorkflowDefinition, error)
}
