package api_test

import (
	"testing"

	"reeve.dev/reeve/server/sdk"
)

// BenchmarkCreateRunFromDefinition: creating a run that names a stored
// workflow definition (resolved to its latest version: two indexed
// reads) against the baseline, in the same run, of a run that carries
// the same YAML inline.
func BenchmarkCreateRunFromDefinition(b *testing.B) {
	e := benchEnv(b)
	yaml := "name: bench\nagent: shell\nprompt: true\n"
	d, err := e.u.Client.CreateWorkflowDefinition(e.ctx, e.u.Workspace, sdk.WorkflowDefinitionCreateRequest{YAML: yaml})
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		req  sdk.WorkflowRunCreateRequest
	}{
		{"inline-yaml", sdk.WorkflowRunCreateRequest{YAMLSnapshot: yaml, Status: sdk.RunDraft}},
		{"stored-definition", sdk.WorkflowRunCreateRequest{DefinitionID: d.ID, Status: sdk.RunDraft}},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := e.u.Client.CreateWorkflowRun(e.ctx, e.u.Workspace, c.req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
