package sdk

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// Stored workflow definitions (docs/workers.md): a workspace's named
// workflow YAMLs, each a list of immutable, numbered versions. A run names
// a definition (it runs the latest version) or one version
// (workflow_version_id), and carries that version's YAML and digest.

// CodeDefinitionInvalid is the 422 of a definition whose YAML is not a
// valid workflow; the answer's data.issues lists each problem.
const CodeDefinitionInvalid = "definition_invalid"

// WorkflowDefinition is a named workflow with its latest version.
type WorkflowDefinition struct {
	ID          string `json:"id"`
	WorkspaceID string `json:"workspace_id"`
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// LatestVersion is the newest version's number, LatestVersionID its
	// id, Digest and YAML its content.
	LatestVersion   int64     `json:"latest_version"`
	LatestVersionID string    `json:"latest_version_id"`
	Digest          string    `json:"digest"`
	YAML            string    `json:"yaml,omitempty"`
	CreatedBy       string    `json:"created_by"`
	CreatedAt       time.Time `json:"created_at"`
	UpdatedAt       time.Time `json:"updated_at"`
	// Versions, oldest first, without their YAML (in the answer of one
	// definition only).
	Versions []WorkflowDefinitionVersion `json:"versions,omitempty"`
}

// WorkflowDefinitionVersion is one version of a definition.
type WorkflowDefinitionVersion struct {
	ID           string    `json:"id"`
	DefinitionID string    `json:"workflow_definition_id"`
	Version      int64     `json:"version"`
	Digest       string    `json:"digest"`
	YAML         string    `json:"yaml,omitempty"`
	CreatedBy    string    `json:"created_by"`
	CreatedAt    time.Time `json:"created_at"`
}

// WorkflowDefinitionCreateRequest creates a definition with its first
// version. Name defaults to the YAML's name:.
type WorkflowDefinitionCreateRequest struct {
	Name        string `json:"name,omitempty"`
	Description string `json:"description,omitempty"`
	YAML        string `json:"yaml"`
}

// WorkflowDefinitionVersionCreateRequest adds a version.
type WorkflowDefinitionVersionCreateRequest struct {
	YAML string `json:"yaml"`
}

// WorkflowDefinitionResponse holds one definition.
type WorkflowDefinitionResponse = Data[WorkflowDefinition]

// WorkflowDefinitionVersionResponse holds one version.
type WorkflowDefinitionVersionResponse = Data[WorkflowDefinitionVersion]

// WorkflowDefinitionCollectionResponse lists definitions by name.
type WorkflowDefinitionCollectionResponse struct {
	Data []WorkflowDefinition `json:"data"`
	Meta ListMeta             `json:"meta"`
}

func definitionsPath(workspaceID, rest string) string {
	return "/api/resources/" + url.PathEscape(workspaceID) + "/workflow-definitions" + rest
}

// CreateWorkflowDefinition stores a definition (422 CodeDefinitionInvalid
// when its YAML is not a valid workflow, 409 when the name is taken).
func (c *Client) CreateWorkflowDefinition(ctx context.Context, workspaceID string, req WorkflowDefinitionCreateRequest) (WorkflowDefinition, error) {
	var r WorkflowDefinitionResponse
	_, err := c.Do(ctx, http.MethodPost, definitionsPath(workspaceID, ""), req, &r)
	return r.Data, err
}

// ListWorkflowDefinitions lists a workspace's definitions.
func (c *Client) ListWorkflowDefinitions(ctx context.Context, workspaceID string) ([]WorkflowDefinition, error) {
	var r WorkflowDefinitionCollectionResponse
	_, err := c.Do(ctx, http.MethodGet, definitionsPath(workspaceID, ""), nil, &r)
	return r.Data, err
}

// GetWorkflowDefinition reads a definition with its versions.
func (c *Client) GetWorkflowDefinition(ctx context.Context, workspaceID, id string) (WorkflowDefinition, error) {
	var r WorkflowDefinitionResponse
	_, err := c.Do(ctx, http.MethodGet, definitionsPath(workspaceID, "/"+url.PathEscape(id)), nil, &r)
	return r.Data, err
}

// DeleteWorkflowDefinition deletes a definition with its versions and
// returns what was deleted; a 409 APIError while an unfinished run names
// it.
func (c *Client) DeleteWorkflowDefinition(ctx context.Context, workspaceID, id string) (WorkflowDefinition, error) {
	var r WorkflowDefinitionResponse
	_, err := c.Do(ctx, http.MethodDelete, definitionsPath(workspaceID, "/"+url.PathEscape(id)), nil, &r)
	return r.Data, err
}

// AddWorkflowDefinitionVersion adds a version; created is false when the
// YAML is the latest version's (that version is returned).
func (c *Client) AddWorkflowDefinitionVersion(ctx context.Context, workspaceID, id, yaml string) (v WorkflowDefinitionVersion, created bool, err error) {
	var r WorkflowDefinitionVersionResponse
	st, err := c.Do(ctx, http.MethodPost, definitionsPath(workspaceID, "/"+url.PathEscape(id)+"/versions"), WorkflowDefinitionVersionCreateRequest{YAML: yaml}, &r)
	return r.Data, st == http.StatusCreated, err
}

// GetWorkflowDefinitionVersion reads one version with its YAML.
func (c *Client) GetWorkflowDefinitionVersion(ctx context.Context, workspaceID, id, versionID string) (WorkflowDefinitionVersion, error) {
	var r WorkflowDefinitionVersionResponse
	_, err := c.Do(ctx, http.MethodGet, definitionsPath(workspaceID, "/"+url.PathEscape(id)+"/versions/"+url.PathEscape(versionID)), nil, &r)
	return r.Data, err
}
