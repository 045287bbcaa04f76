package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

var _ WorkflowDefinitions = (*DB)(nil)

const (
	defCols  = `id, workspace_id, name, description, latest_version, created_by, created_at, updated_at`
	defVCols = `id, definition_id, workspace_id, version, yaml, digest, created_by, created_at`
)

func scanDefinition(sc scanner) (WorkflowDefinition, error) {
	var d WorkflowDefinition
	var c, u string
	if err := sc.Scan(&d.ID, &d.WorkspaceID, &d.Name, &d.Description, &d.LatestVersion, &d.CreatedBy, &c, &u); err != nil {
		return WorkflowDefinition{}, err
	}
	d.CreatedAt, d.UpdatedAt = parseTS(c), parseTS(u)
	return d, nil
}

func scanDefinitionVersion(sc scanner) (WorkflowDefinitionVersion, error) {
	var v WorkflowDefinitionVersion
	var c string
	if err := sc.Scan(&v.ID, &v.DefinitionID, &v.WorkspaceID, &v.Version, &v.YAML, &v.Digest, &v.CreatedBy, &c); err != nil {
		return WorkflowDefinitionVersion{}, err
	}
	v.CreatedAt = parseTS(c)
	return v, nil
}

func insertDefinitionVersion(tx *Tx, v WorkflowDefinitionVersion) error {
	_, err := tx.Exec(`INSERT INTO workflow_definition_versions (`+defVCols+`) VALUES (?,?,?,?,?,?,?,?)`,
		v.ID, v.DefinitionID, v.WorkspaceID, v.Version, v.YAML, v.Digest, v.CreatedBy, ts(v.CreatedAt))
	if err != nil {
		return fmt.Errorf("add workflow definition version: %w", err)
	}
	return nil
}

func (s *DB) CreateWorkflowDefinition(ctx context.Context, d *WorkflowDefinition, v *WorkflowDefinitionVersion, audit AuditEntry) error {
	d.LatestVersion = 1
	v.DefinitionID, v.WorkspaceID, v.Version = d.ID, d.WorkspaceID, 1
	return s.execSimple(ctx, func(tx *Tx) error {
		_, err := tx.Exec(`INSERT INTO workflow_definitions (`+defCols+`) VALUES (?,?,?,?,?,?,?,?)`,
			d.ID, d.WorkspaceID, d.Name, d.Description, d.LatestVersion, d.CreatedBy, ts(d.CreatedAt), ts(d.UpdatedAt))
		if isUniqueViolation(err) {
			return fmt.Errorf("a workflow definition named %q exists: %w", d.Name, ErrConflict)
		}
		if err != nil {
			return fmt.Errorf("create workflow definition: %w", err)
		}
		if err := insertDefinitionVersion(tx, *v); err != nil {
			return err
		}
		return insertAudit(tx, audit)
	})
}

func (s *DB) WorkflowDefinition(ctx context.Context, workspaceID, id string) (WorkflowDefinition, error) {
	d, err := scanDefinition(s.queryRow(ctx, `SELECT `+defCols+` FROM workflow_definitions WHERE workspace_id = ? AND id = ?`, workspaceID, id))
	return d, notFound(err)
}

func (s *DB) WorkflowDefinitions(ctx context.Context, workspaceID string) ([]WorkflowDefinition, error) {
	rows, err := s.query(ctx, `SELECT `+defCols+` FROM workflow_definitions WHERE workspace_id = ? ORDER BY name, id`, workspaceID)
	if err != nil {
		return nil, fmt.Errorf("list workflow definitions: %w", err)
	}
	return collect(rows, scanDefinition)
}

func (s *DB) AddWorkflowDefinitionVersion(ctx context.Context, workspaceID, definitionID string, v WorkflowDefinitionVersion, audit AuditEntry) (WorkflowDefinitionVersion, bool, error) {
	var out WorkflowDefinitionVersion
	created := false
	err := s.execLocked(ctx, func(tx *Tx) error {
		// The definition's row lock orders concurrent additions: each
		// reads the latest number after the one before it wrote.
		d, err := scanDefinition(tx.QueryRow(`SELECT `+defCols+` FROM workflow_definitions WHERE workspace_id = ? AND id = ?`+s.forUpdate(), workspaceID, definitionID))
		if err != nil {
			return notFound(err)
		}
		latest, err := scanDefinitionVersion(tx.QueryRow(`SELECT `+defVCols+` FROM workflow_definition_versions WHERE definition_id = ? AND version = ?`, d.ID, d.LatestVersion))
		if err != nil {
			return fmt.Errorf("read the latest version of workflow definition %s: %w", d.ID, err)
		}
		if latest.Digest == v.Digest {
			out = latest
			return nil
		}
		v.DefinitionID, v.WorkspaceID, v.Version = d.ID, d.WorkspaceID, d.LatestVersion+1
		if err := insertDefinitionVersion(tx, v); err != nil {
			return err
		}
		if _, err := tx.Exec(`UPDATE workflow_definitions SET latest_version = ?, updated_at = ? WHERE id = ?`, v.Version, ts(v.CreatedAt), d.ID); err != nil {
			return fmt.Errorf("update workflow definition: %w", err)
		}
		out, created = v, true
		return insertAudit(tx, audit)
	})
	return out, created, err
}

func (s *DB) WorkflowDefinitionVersions(ctx context.Context, workspaceID, definitionID string) ([]WorkflowDefinitionVersion, error) {
	rows, err := s.query(ctx, `SELECT `+defVCols+` FROM workflow_definition_versions WHERE workspace_id = ? AND definition_id = ? ORDER BY version`, workspaceID, definitionID)
	if err != nil {
		return nil, fmt.Errorf("list workflow definition versions: %w", err)
	}
	return collect(rows, scanDefinitionVersion)
}

func (s *DB) WorkflowDefinitionVersion(ctx context.Context, workspaceID, id string) (WorkflowDefinitionVersion, error) {
	v, err := scanDefinitionVersion(s.queryRow(ctx, `SELECT `+defVCols+` FROM workflow_definition_versions WHERE workspace_id = ? AND id = ?`, workspaceID, id))
	return v, notFound(err)
}

func (s *DB) LatestWorkflowDefinitionVersion(ctx context.Context, workspaceID, definitionID string) (WorkflowDefinitionVersion, error) {
	v, err := scanDefinitionVersion(s.queryRow(ctx, `SELECT v.id, v.definition_id, v.workspace_id, v.version, v.yaml, v.digest, v.created_by, v.created_at
		FROM workflow_definition_versions v JOIN workflow_definitions d ON d.id = v.definition_id AND d.latest_version = v.version
		WHERE d.workspace_id = ? AND d.id = ?`, workspaceID, definitionID))
	return v, notFound(err)
}

// unfinishedRuns selects the runs that may still run, so the definition
// they name must stay. Listed, not "NOT IN" the finished ones: the list is
// ranges of the (workspace_id, status, seq) queue index, so the check
// reads the few unfinished runs, not the workspace's history
// (BenchmarkDeleteDefinitionCheck).
const unfinishedRuns = `status IN ('draft', 'queued', 'blocked', 'leased', 'running', 'waiting-approval')`

func (s *DB) DeleteWorkflowDefinition(ctx context.Context, workspaceID, id string, audit AuditEntry) (WorkflowDefinition, error) {
	var out WorkflowDefinition
	err := s.execLocked(ctx, func(tx *Tx) error {
		// The row lock orders this against CreateRun, which holds the same
		// row (FOR SHARE) while it writes a run naming the definition: a
		// run is either written first and seen below, or refused after.
		d, err := scanDefinition(tx.QueryRow(`SELECT `+defCols+` FROM workflow_definitions WHERE workspace_id = ? AND id = ?`+s.forUpdate(), workspaceID, id))
		if err != nil {
			return notFound(err)
		}
		holding, err := runsNaming(tx, unfinishedRuns, workspaceID, d.ID)
		if err != nil {
			return err
		}
		if len(holding) > 0 {
			more := ""
			if len(holding) > 5 {
				holding, more = holding[:5], fmt.Sprintf(" and %d more", len(holding)-5)
			}
			return fmt.Errorf("%w: workflow definition %s is named by runs that have not finished: %s%s", ErrConflict, d.ID, strings.Join(holding, ", "), more)
		}
		if _, err := tx.Exec(`DELETE FROM workflow_definition_versions WHERE workspace_id = ? AND definition_id = ?`, workspaceID, d.ID); err != nil {
			return fmt.Errorf("delete the versions of workflow definition %s: %w", d.ID, err)
		}
		if _, err := tx.Exec(`DELETE FROM workflow_definitions WHERE workspace_id = ? AND id = ?`, workspaceID, d.ID); err != nil {
			return fmt.Errorf("delete workflow definition %s: %w", d.ID, err)
		}
		out = d
		return insertAudit(tx, audit)
	})
	return out, err
}

// runsNaming lists, in queue order, the runs of the workspace matching
// the status predicate whose spec names the definition. The definition is
// named inside the spec JSON: the LIKE narrows the rows and the decode
// decides (an id quoted in a prompt does not hold the definition).
func runsNaming(tx *Tx, statusPredicate, workspaceID, definitionID string) ([]string, error) {
	rows, err := tx.Query(`SELECT id, spec FROM workflow_runs WHERE `+statusPredicate+` AND workspace_id = ? AND spec LIKE ? ORDER BY seq`,
		workspaceID, "%"+definitionID+"%")
	if err != nil {
		return nil, fmt.Errorf("find the runs of workflow definition %s: %w", definitionID, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var runID, spec string
		if err := rows.Scan(&runID, &spec); err != nil {
			return nil, fmt.Errorf("find the runs of workflow definition %s: %w", definitionID, err)
		}
		if specDefinition(spec) == definitionID {
			out = append(out, runID)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("find the runs of workflow definition %s: %w", definitionID, err)
	}
	return out, nil
}

// specDefinition is the workflow definition a run's spec names, if any.
func specDefinition(spec string) string {
	var sp struct {
		DefinitionID string `json:"workflow_definition_id"`
	}
	_ = json.Unmarshal([]byte(spec), &sp)
	return sp.DefinitionID
}

// holdDefinition keeps the definition a new run names from being deleted
// until the run is written (FOR SHARE on PostgreSQL; SQLite has one
// writer). ErrNotFound when it is gone.
func (s *DB) holdDefinition(tx *Tx, workspaceID, spec string) error {
	id := specDefinition(spec)
	if id == "" {
		return nil
	}
	lock := ""
	if s.engine == EnginePostgres {
		lock = " FOR SHARE"
	}
	var got string
	if err := tx.QueryRow(`SELECT id FROM workflow_definitions WHERE workspace_id = ? AND id = ?`+lock, workspaceID, id).Scan(&got); err != nil {
		if err := notFound(err); errors.Is(err, ErrNotFound) {
			return fmt.Errorf("workflow definition %s no longer exists: %w", id, ErrNotFound)
		}
		return fmt.Errorf("read workflow definition %s: %w", id, err)
	}
	return nil
}
