package api

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"path"
	"strconv"
	"strings"

	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/store"
)

// Team resources (docs/team-resources.md): a workspace's shared project
// configuration, a bundle of .reeve/ files per resource name. Admins put a
// bundle; members read it; a paired machine reads it with its issue token
// and, after `reeve team-resource sync` committed it, reports the commit.
// Bundles and receipts are records of the store, keyed by resource name.

const (
	teamResourceCollection = "team-resources"
	teamReceiptCollection  = "team-resource-receipts"
)

func teamResourceRoutes() []Route {
	ws := "/api/workspaces/{workspace}/team-resources/{resource}"
	rt := "/api/runtime/workspaces/{workspace}/team-resources/{resource}"
	return []Route{
		typed("PUT", ws, "", "Team Resources", 200, "TeamResourceBundleResponse").body("TeamResourceBundleRequest", true).role("admin").
			summary("Replace a team resource bundle; every file's sha256 must match its content and its path lie under .reeve/; the version goes up by one").errs(403, 422),
		typed("GET", ws, "", "Team Resources", 200, "TeamResourceBundleResponse").summary("A team resource bundle").errs(403, 404),
		typed("GET", ws+"/sync-receipts", "", "Team Resources", 200, "RecordCollectionResponse").summary("What machines reported after committing the bundle, oldest first").
			query(qInt("after", "Sequence cursor"), qInt("limit", "Page size")).errs(403),
		typed("GET", rt, "", "Runtime", 200, "TeamResourceBundleResponse").summary("The bundle, for the paired machine that syncs it").errs(403, 404),
		typed("POST", rt+"/sync-receipts", "", "Runtime", 201, "RecordResponse").body("TeamResourceSyncReceiptRequest", true).
			summary("The machine reports the commit the bundle landed in").errs(403, 404, 422),
	}
}

func (s *Server) teamResourceHandlers() map[string]handlerFunc {
	return map[string]handlerFunc{
		"putApiWorkspacesWorkspaceTeamResourcesResource":                     s.putTeamResource,
		"getApiWorkspacesWorkspaceTeamResourcesResource":                     s.getTeamResource,
		"getApiWorkspacesWorkspaceTeamResourcesResourceSyncReceipts":         s.listTeamReceipts,
		"getApiRuntimeWorkspacesWorkspaceTeamResourcesResource":              s.getTeamResource,
		"postApiRuntimeWorkspacesWorkspaceTeamResourcesResourceSyncReceipts": s.postTeamReceipt,
	}
}

func teamResourceRequestSchemas() map[string]schema {
	file := object([]string{"path", "sha256", "content_base64"}, schema{
		"path":           described(schema{"type": "string", "pattern": `^\.reeve/`, "maxLength": 1000}, "Slash-separated path under .reeve/."),
		"sha256":         schema{"type": "string", "pattern": "^[0-9a-f]{64}$"},
		"content_base64": described(schema{"type": "string", "maxLength": 900000}, "Standard base64 of the content."),
	})
	return map[string]schema{
		"TeamResourceBundleRequest": object([]string{"files"}, schema{
			"files": schema{"type": "array", "items": file, "minItems": 1, "maxItems": 1000},
		}),
		"TeamResourceSyncReceiptRequest": object([]string{"resource"}, schema{
			"resource": tString(), "version": tString(), "commit": schema{"type": "string", "pattern": "^([0-9a-f]{40}|[0-9a-f]{64})?$"},
			"repo": schema{"type": "string", "maxLength": 200}, "executor": schema{"type": "string", "maxLength": 200}, "files": tInt(),
		}),
	}
}

func teamResourceResponseSchemas() map[string]schema {
	return map[string]schema{
		"TeamResourceBundleResponse": object([]string{"data"}, schema{"data": object([]string{"workspace", "resource", "version", "files"}, schema{
			"workspace": tString(), "resource": tString(), "version": tString(),
			"files": arrayOf(object([]string{"path", "sha256", "content_base64"}, schema{"path": tString(), "sha256": tString(), "content_base64": tString()})),
		})}),
	}
}

// resourceName is the {resource} path value, checked.
func resourceName(c *call) (string, error) {
	name := c.r.PathValue("resource")
	if name == "" || len(name) > 64 || strings.Trim(name, "abcdefghijklmnopqrstuvwxyz0123456789._-") != "" || strings.HasPrefix(name, ".") {
		return "", invalid(sdk.ErrorDetail{Field: "resource", Message: "a resource name is 1 to 64 of a-z, 0-9, '.', '_' and '-', not starting with '.'"})
	}
	return name, nil
}

func (s *Server) putTeamResource(c *call) (int, any, error) {
	name, err := resourceName(c)
	if err != nil {
		return 0, nil, err
	}
	var b sdk.TeamResourceBundle
	if err := c.decode(&b); err != nil {
		return 0, nil, err
	}
	seen := map[string]bool{}
	for i, f := range b.Files {
		field := "files[" + strconv.Itoa(i) + "]"
		clean := path.Clean(f.Path)
		if clean != f.Path || !strings.HasPrefix(clean, ".reeve/") || strings.Contains(f.Path, "\\") || strings.HasPrefix(clean, ".reeve/.git") {
			return 0, nil, invalid(sdk.ErrorDetail{Field: field + ".path", Message: "the path must be clean and lie under .reeve/"})
		}
		if seen[clean] {
			return 0, nil, invalid(sdk.ErrorDetail{Field: field + ".path", Message: "the path appears twice"})
		}
		seen[clean] = true
		content, err := base64.StdEncoding.DecodeString(f.ContentBase64)
		if err != nil {
			return 0, nil, invalid(sdk.ErrorDetail{Field: field + ".content_base64", Message: "not standard base64"})
		}
		sum := sha256.Sum256(content)
		if hex.EncodeToString(sum[:]) != f.SHA256 {
			return 0, nil, invalid(sdk.ErrorDetail{Field: field + ".sha256", Message: "does not match the content"})
		}
	}
	b.Workspace, b.Resource = c.ws.ID, name
	write := func(version int) ([]byte, error) {
		b.Version = strconv.Itoa(version)
		return json.Marshal(b)
	}
	rec, err := s.st.RecordByKey(c.ctx(), c.ws.ID, teamResourceCollection, name)
	switch {
	case errors.Is(err, store.ErrNotFound):
		attrs, err := write(1)
		if err != nil {
			return 0, nil, err
		}
		now := c.now()
		r := store.Record{ID: newRecordID(), WorkspaceID: c.ws.ID, Collection: teamResourceCollection, NaturalKey: name, Attributes: attrs, CreatedBy: c.p.Actor(), CreatedAt: now, UpdatedAt: now}
		if err := s.st.CreateRecord(c.ctx(), &r, c.audit("team-resource.put", name, map[string]any{"version": b.Version, "files": len(b.Files)})); err != nil {
			if errors.Is(err, store.ErrConflict) {
				return 0, nil, errorf(http.StatusConflict, sdk.CodeConflict, "the bundle %s was created at the same time; read it and put again", name)
			}
			return 0, nil, err
		}
	case err != nil:
		return 0, nil, err
	default:
		_, err = s.st.UpdateRecordIf(c.ctx(), c.ws.ID, teamResourceCollection, rec.ID, func(r *store.Record) error {
			var old sdk.TeamResourceBundle
			if err := json.Unmarshal(r.Attributes, &old); err != nil {
				return err
			}
			n, _ := strconv.Atoi(old.Version)
			attrs, err := write(n + 1)
			if err != nil {
				return err
			}
			r.Attributes, r.UpdatedAt = attrs, c.now()
			return nil
		}, c.audit("team-resource.put", name, map[string]any{"files": len(b.Files)}))
		if err != nil {
			return 0, nil, err
		}
	}
	return http.StatusOK, map[string]any{"data": b}, nil
}

func (s *Server) getTeamResource(c *call) (int, any, error) {
	name, err := resourceName(c)
	if err != nil {
		return 0, nil, err
	}
	rec, err := s.st.RecordByKey(c.ctx(), c.ws.ID, teamResourceCollection, name)
	if errors.Is(err, store.ErrNotFound) {
		return 0, nil, notFound("the workspace has no team resource %q", name)
	}
	if err != nil {
		return 0, nil, err
	}
	var b sdk.TeamResourceBundle
	if err := json.Unmarshal(rec.Attributes, &b); err != nil {
		return 0, nil, err
	}
	return http.StatusOK, map[string]any{"data": b}, nil
}

func (s *Server) postTeamReceipt(c *call) (int, any, error) {
	name, err := resourceName(c)
	if err != nil {
		return 0, nil, err
	}
	if _, err := s.st.RecordByKey(c.ctx(), c.ws.ID, teamResourceCollection, name); errors.Is(err, store.ErrNotFound) {
		return 0, nil, notFound("the workspace has no team resource %q", name)
	} else if err != nil {
		return 0, nil, err
	}
	var rcpt sdk.TeamResourceSyncReceipt
	if err := c.decode(&rcpt); err != nil {
		return 0, nil, err
	}
	if rcpt.Resource != name {
		return 0, nil, invalid(sdk.ErrorDetail{Field: "resource", Message: "does not match the path"})
	}
	attrs := map[string]any{"resource": rcpt.Resource, "version": rcpt.Version, "commit": rcpt.Commit, "repo": rcpt.Repo, "executor": rcpt.Executor, "files": rcpt.Files, "install_id": c.p.InstallID}
	r, err := c.createRecord(teamReceiptCollection, "", attrs)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusCreated, map[string]any{"data": r}, nil
}

func (s *Server) listTeamReceipts(c *call) (int, any, error) {
	if _, err := resourceName(c); err != nil {
		return 0, nil, err
	}
	return c.listRecords(teamReceiptCollection, http.StatusOK)
}
