package api

import "strings"

// The route rows, handlers and schemas of workflow runs, managed
// executors and the worker runtime (docs/workers.md).

// tuneWorkflowRoutes gives the spec's placeholder rows of workflow runs
// and managed executors the bodies and answers their handlers have.
func tuneWorkflowRoutes(t []Route) {
	wr := "/api/workflow-runs"
	item := wr + "/{workflowRun}"
	me := "/api/managed-executors"
	views := map[string]string{
		"/story":             "The run's history as sentences: creation, leases, expiries, approvals, completion",
		"/telemetry":         "Counts and durations from the run's history: attempts, queue wait, expiries, approvals, usage",
		"/trace-feed":        "The run as spans: the run, each attempt (lease) and each approval wait",
		"/trace-feed/export": "The trace feed with every event, as a download",
		"/gates":             "Which gates passed: definition, budget, approvals, lease, exit status, outcome",
	}
	for i := range t {
		r := &t[i]
		switch key := r.Method + " " + r.Path; {
		case key == "GET "+wr:
			r.SuccessSchema, r.Summary = "WorkflowRunCollectionResponse", "List the workspace's workflow runs in queue order"
			r.Query = []Param{qStr("status", "only runs in this state"), qInt("after", "sequence cursor"), qInt("limit", "page size, at most 500")}
		case key == "POST "+wr:
			*r = r.body("WorkflowRunCreateRequest", true).success(201).resp("WorkflowRunResponse").errs(409, 422).
				summary("Create a workflow run: queued (or draft); blocked when the budget admits no run; 422 not_runnable with each preflight issue; 409 when the workflow definition it names is deleted meanwhile")
		case key == "GET "+item:
			*r = r.resp("WorkflowRunResponse").errs(404).summary("One workflow run with its approval nodes")
		case key == "PATCH "+item:
			*r = r.body("WorkflowRunUpdateRequest", true).resp("WorkflowRunResponse").errs(404, 409).summary("Queue a draft or blocked run (admission checked again), or put a queued one back to draft")
		case key == "POST "+item+"/cancel":
			*r = r.success(200).resp("WorkflowRunResponse").errs(404, 409).summary("Cancel: at once when no worker holds the run, else its holder is told on its next heartbeat")
		case key == "POST "+item+"/rerun":
			*r = r.success(201).resp("WorkflowRunResponse").errs(404, 409, 422).summary("Queue a new run with a finished run's request")
		case key == "POST "+item+"/events":
			*r = r.body("WorkflowRunEventsRequest", false).success(200).resp("WorkflowRunEventCollectionResponse").errs(404).summary("The run's history after a sequence")
		case key == "POST "+item+"/approvals/{nodeKey}":
			*r = r.body("WorkflowApprovalDecisionRequest", true).success(200).resp("WorkflowApprovalResponse").errs(404, 409).summary("Approve or deny an approval node the worker raised")
		case key == "GET "+item+"/audit-packet":
			*r = r.resp("WorkflowRunAuditPacketResponse").errs(404).summary("The run, its approvals and its events in a hash chain, signed with the evidence key")
		case r.Method == "GET" && strings.HasPrefix(r.Path, item+"/") && views[strings.TrimPrefix(r.Path, item)] != "":
			*r = r.resp("WorkflowRunViewResponse").errs(404).summary(views[strings.TrimPrefix(r.Path, item)])
		case key == "GET "+me:
			*r = r.resp("ManagedExecutorCollectionResponse").summary("List the workspace's managed executors (never their credentials)")
		case key == "POST "+me:
			*r = r.body("ManagedExecutorCreateRequest", true).success(201).resp("ManagedExecutorResponse").role("admin").errs(409).
				summary("Create a managed executor; the answer carries its runner credential (rwc_) once")
		case key == "DELETE "+me+"/{managedExecutor}":
			*r = r.success(200).resp("ManagedExecutorResponse").role("admin").errs(404).summary("Delete a managed executor: its runner credential stops at once")
		case key == "POST "+me+"/{managedExecutor}/rotate-credential":
			*r = r.success(200).resp("ManagedExecutorResponse").role("admin").errs(404).summary("Issue a new runner credential (answered once); the old one stops at once")
		case key == "PATCH "+me+"/{managedExecutor}/tags":
			*r = r.body("ManagedExecutorTagsRequest", true).resp("ManagedExecutorResponse").role("admin").errs(404).summary("Replace the executor's tags (its capabilities)")
		}
	}
}

func (s *Server) workflowHandlers() map[string]handlerFunc {
	m := map[string]handlerFunc{
		"preflightWorkflowRun":                                   s.preflight,
		"queueAgentSessionRunAttempt":                            s.queueSessionAttempt,
		"getApiWorkflowRuns":                                     s.listRuns,
		"postApiWorkflowRuns":                                    s.createRun,
		"getApiWorkflowRunsWorkflowRun":                          s.getRun,
		"patchApiWorkflowRunsWorkflowRun":                        s.patchRun,
		"postApiWorkflowRunsWorkflowRunCancel":                   s.cancelRun,
		"postApiWorkflowRunsWorkflowRunRerun":                    s.rerunRun,
		"postApiWorkflowRunsWorkflowRunEvents":                   s.runEvents,
		"postApiWorkflowRunsWorkflowRunApprovalsNodeKey":         s.decideApproval,
		"getApiWorkflowRunsWorkflowRunStory":                     s.runStory,
		"getApiWorkflowRunsWorkflowRunTelemetry":                 s.runTelemetry,
		"getApiWorkflowRunsWorkflowRunTraceFeed":                 s.runTraceFeed(false),
		"getApiWorkflowRunsWorkflowRunTraceFeedExport":           s.runTraceFeed(true),
		"getApiWorkflowRunsWorkflowRunAuditPacket":               s.runAuditPacket,
		"getApiWorkflowRunsWorkflowRunGates":                     s.runGates,
		"getApiManagedExecutors":                                 s.listExecutors,
		"postApiManagedExecutors":                                s.createExecutor,
		"deleteApiManagedExecutorsManagedExecutor":               s.deleteExecutor,
		"postApiManagedExecutorsManagedExecutorRotateCredential": s.rotateExecutor,
		"patchApiManagedExecutorsManagedExecutorTags":            s.setExecutorTags,
		"getWorkerIdentity":                                      s.workerIdentity,
		"claimWorkerLease":                                       s.claimLease,
		"getWorkerLeaseByToken":                                  s.leaseByToken,
		"heartbeatWorkerLease":                                   s.heartbeatLease,
		"reportWorkerLeaseState":                                 s.leaseState,
		"appendWorkerLeaseEvents":                                s.leaseEvents,
		"raiseWorkerLeaseApproval":                               s.raiseApproval,
		"getWorkerLeaseApproval":                                 s.leaseApproval,
		"completeWorkerLease":                                    s.completeLease,
		"releaseWorkerLease":                                     s.releaseLease,
	}
	for k, v := range s.workflowDefinitionHandlers() {
		m[k] = v
	}
	// The other routes under a run (replay, contract health, action
	// proposals, ...) stay with the record engine, behind the run's 404.
	for _, r := range s.routes {
		if !strings.HasPrefix(r.Path, "/api/workflow-runs/{workflowRun}/") || r.TwinOf != "" {
			continue
		}
		if _, ok := m[r.OperationID]; !ok {
			m[r.OperationID] = s.withRun(s.engineHandler(r, nil))
		}
	}
	return m
}

func workflowRequestSchemas() map[string]schema {
	strs := func(max int) schema {
		return schema{"type": "array", "items": schema{"type": "string", "minLength": 1, "maxLength": 100}, "maxItems": max}
	}
	runFields := func() schema {
		return schema{
			"agent":                  schema{"type": "string", "maxLength": 100},
			"model":                  schema{"type": "string", "maxLength": 200},
			"prompt":                 schema{"type": "string", "maxLength": 200000},
			"yaml_snapshot":          described(schema{"type": "string", "maxLength": 200000}, "A workflow YAML: agent, model, prompt, tags, workdir, repo, max_attempts (the request's fields override it)."),
			"workflow_definition_id": described(tString(), "A stored workflow definition: the run carries its latest version's YAML (or workflow_version_id's)."),
			"workflow_version_id":    described(tString(), "One version of a stored workflow definition."),
			"workflow_digest":        described(tString(), "The expected sha256:<hex> of the workflow YAML; refused when the definition changed."),
			"runner_pool":            described(schema{"type": "string", "pattern": `^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$`}, "Only workers polling for this pool may claim the run."),
			"workdir":                described(schema{"type": "string", "maxLength": 1000}, "A directory the worker has: a path or the name given with --workdir."),
			"repo":                   schema{"type": "string", "maxLength": 1000},
			"tags":                   described(strs(50), "Capabilities a managed executor must all have."),
			"managed_executor_id":    tString(),
			"session_id":             tString(),
			"max_attempts":           schema{"type": "integer", "minimum": 1, "maximum": 20},
		}
	}
	create := runFields()
	create["status"] = enum("queued", "draft")
	attempt := runFields()
	attempt["managed_executor_id"] = tStringNull()
	delete(attempt, "session_id")
	preflight := runFields()
	for _, f := range []string{"workflow_definition_id", "workflow_version_id", "workflow_route_id", "workflow_route_version_id", "workflow_execution_profile_id", "workflow_execution_profile_version_id", "integration_event_id", "runtime_target_id", "managed_executor_id"} {
		preflight[f] = typ("string", "integer", "null")
	}
	preflight["workflow_digest"], preflight["yaml_snapshot"], preflight["runner_pool"] = tStringNull(), typ("string", "null"), typ("string", "null")
	preflight["status"], preflight["data_capture_policy"] = enum("queued", "draft", "blocked"), typ("object", "null")
	fence := described(schema{"type": "integer", "minimum": 1}, "The lease's fence, from the claim.")
	checkpoint := object([]string{"sha"}, schema{"sha": schema{"type": "string", "pattern": "^[0-9a-f]{7,64}$"}, "message": tString(), "at": tString()})
	usage := object(nil, schema{"provider": tString(), "model": tString(), "input_tokens": schema{"type": "integer", "minimum": 0},
		"output_tokens": schema{"type": "integer", "minimum": 0}, "total_tokens": schema{"type": "integer", "minimum": 0},
		"cost_usd": described(schema{"type": "string", "pattern": `^[0-9]+(\.[0-9]+)?$`}, "Exact decimal dollars.")})
	return map[string]schema{
		"WorkflowRunCreateRequest":        object(nil, create),
		"AgentSessionRunAttemptRequest":   object(nil, attempt),
		"WorkflowRunPreflightRequest":     object(nil, preflight),
		"WorkflowRunUpdateRequest":        object([]string{"status"}, schema{"status": enum("queued", "draft")}),
		"WorkflowRunEventsRequest":        object(nil, schema{"after_sequence": schema{"type": "integer", "minimum": 0}, "limit": schema{"type": "integer", "minimum": 1, "maximum": 1000}}),
		"WorkflowApprovalDecisionRequest": object([]string{"decision"}, schema{"decision": enum("approve", "deny"), "reason": schema{"type": "string", "maxLength": 2000}}),
		"ManagedExecutorCreateRequest": object([]string{"name"}, schema{"name": schema{"type": "string", "minLength": 1, "maxLength": 100},
			"tags": strs(50), "agents": strs(20)}),
		"ManagedExecutorTagsRequest": object([]string{"tags"}, schema{"tags": strs(50)}),
		"WorkerClaimRequest": object(nil, schema{"agents": strs(20), "tags": strs(50), "workdirs": described(schema{"type": "array", "items": schema{"type": "string", "maxLength": 1000}, "maxItems": 200}, "Only runs naming one of these (or none)."),
			"runner_pool":  described(schema{"type": "string", "pattern": `^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$`}, "The pool the worker serves: it claims only runs naming this pool (none: only runs naming no pool)."),
			"wait_seconds": schema{"type": "integer", "minimum": 0, "maximum": 60}}),
		"LeaseFenceRequest": object([]string{"fence"}, schema{"fence": fence}),
		"LeaseStateRequest": object([]string{"fence", "state"}, schema{"fence": fence, "state": enum("running", "waiting-approval"),
			"session_id": schema{"type": "string", "maxLength": 200}, "message": schema{"type": "string", "maxLength": 2000}}),
		"LeaseEventsRequest": object([]string{"fence", "events"}, schema{"fence": fence, "events": schema{"type": "array", "maxItems": 500,
			"items": object([]string{"kind"}, schema{"kind": schema{"type": "string", "minLength": 1, "maxLength": 100}, "at": tString(), "data": tObject()})}}),
		"LeaseApprovalRequest": object([]string{"fence", "node_key", "tool"}, schema{"fence": fence,
			"node_key": schema{"type": "string", "pattern": `^[A-Za-z0-9._:-]{1,200}$`}, "tool": schema{"type": "string", "minLength": 1, "maxLength": 200},
			"summary": schema{"type": "string", "maxLength": 4000}, "input": tObject(), "timeout_seconds": schema{"type": "integer", "minimum": 1, "maximum": 86400}}),
		"LeaseCompleteRequest": object([]string{"fence", "status"}, schema{"fence": fence, "status": enum("succeeded", "failed", "cancelled"),
			"exit_code": typ("integer", "null"), "diff_summary": schema{"type": "string", "maxLength": 200000}, "checkpoints": schema{"type": "array", "items": checkpoint, "maxItems": 1000},
			"usage": usage, "session_id": schema{"type": "string", "maxLength": 200}, "error": schema{"type": "string", "maxLength": 20000}}),
		"LeaseReleaseRequest": object([]string{"fence", "reason"}, schema{"fence": fence, "reason": schema{"type": "string", "minLength": 1, "maxLength": 2000}}),
		"WorkflowDefinitionCreateRequest": object([]string{"yaml"}, schema{
			"name":        described(schema{"type": "string", "minLength": 1, "maxLength": 100}, "Unique in the workspace; defaults to the YAML's name:."),
			"description": schema{"type": "string", "maxLength": 2000},
			"yaml":        described(schema{"type": "string", "minLength": 1, "maxLength": 200000}, "The workflow YAML: name, description, agent, model, prompt, tags, workdir, repo, runner_pool, max_attempts."),
		}),
		"WorkflowDefinitionVersionCreateRequest": object([]string{"yaml"}, schema{"yaml": schema{"type": "string", "minLength": 1, "maxLength": 200000}}),
	}
}

func workflowResponseSchemas() map[string]schema {
	approval := object([]string{"node_key", "run_id", "state", "tool", "requested_at", "expires_at"}, schema{
		"node_key": tString(), "run_id": tString(), "state": enum("pending", "approved", "denied", "expired"), "tool": tString(), "summary": tString(),
		"input": tObject(), "requested_at": tString(), "expires_at": tString(), "decided_by": tString(), "decided_at": tString(), "reason": tString(),
	})
	run := object([]string{"id", "workspace_id", "status", "agent", "tags", "attempt", "max_attempts", "cancel_requested", "created_by", "created_at", "updated_at"}, schema{
		"id": tString(), "workspace_id": tString(), "status": enum("draft", "queued", "blocked", "leased", "running", "waiting-approval", "succeeded", "failed", "cancelled"),
		"agent": tString(), "model": tString(), "prompt": tString(), "definition": tString(), "workflow_definition_id": tString(), "workflow_version_id": tString(),
		"workflow_digest": tString(), "runner_pool": tString(), "workdir": tString(), "repo": tString(),
		"tags": arrayOf(tString()), "managed_executor_id": tString(), "session_id": tString(),
		"linked_session_id": described(tString(), "The session the run was queued from (run-attempts)."),
		"synced_session_id": described(tString(), "The control plane's session record of the worker's daemon session, once the daemon's session sync published it; on single reads and lists alike."), "attempt": tInt(), "max_attempts": tInt(),
		"lease_id": tString(), "executor_id": tString(), "cancel_requested": typ("boolean"), "blocked_reason": tString(), "rerun_of": tString(),
		"exit_code": tInt(), "diff_summary": tString(), "checkpoints": arrayOf(tObject()), "usage": tObject(), "error": tString(),
		"created_by": tString(), "created_at": tString(), "updated_at": tString(), "started_at": tString(), "finished_at": tString(),
		"approvals": arrayOf(ref("WorkflowApproval")),
	})
	executor := object([]string{"id", "workspace_id", "name", "tags", "agents", "credential_prefix", "created_by", "created_at"}, schema{
		"id": tString(), "workspace_id": tString(), "name": tString(), "tags": arrayOf(tString()), "agents": arrayOf(tString()),
		"credential_prefix": tString(), "created_by": tString(), "created_at": tString(), "rotated_at": tString(), "last_seen_at": tString(),
		"credential": described(tString(), "The runner credential: only in the answers of create and rotate-credential."),
	})
	lease := object([]string{"lease_id", "fence", "run_id", "executor_id", "expires_at", "heartbeat_interval", "ttl", "run"}, schema{
		"lease_id": tString(), "token": described(tString(), "The lease token (rwl_): only in the claim answer."), "fence": tInt(), "run_id": tString(),
		"executor_id": tString(), "expires_at": tString(), "heartbeat_interval": tInt(), "ttl": tInt(), "run": ref("WorkflowRun"),
	})
	version := object([]string{"id", "workflow_definition_id", "version", "digest", "created_by", "created_at"}, schema{
		"id": tString(), "workflow_definition_id": tString(), "version": tInt(), "digest": tString(),
		"yaml": described(tString(), "In the answers of one version (and of creating one)."), "created_by": tString(), "created_at": tString(),
	})
	definition := object([]string{"id", "workspace_id", "name", "latest_version", "latest_version_id", "digest", "created_by", "created_at", "updated_at"}, schema{
		"id": tString(), "workspace_id": tString(), "name": tString(), "description": tString(), "latest_version": tInt(), "latest_version_id": tString(),
		"digest": tString(), "yaml": described(tString(), "The latest version's YAML (not in lists)."), "created_by": tString(), "created_at": tString(), "updated_at": tString(),
		"versions": described(arrayOf(ref("WorkflowDefinitionVersion")), "Every version, oldest first, without YAML (in the answer of one definition)."),
	})
	issue := object([]string{"code", "message"}, schema{"code": tString(), "message": tString(), "field": tString()})
	data := func(s schema) schema { return object([]string{"data"}, schema{"data": s}) }
	list := func(item string) schema {
		return object([]string{"data", "meta"}, schema{"data": arrayOf(ref(item)), "meta": ref("ListMeta")})
	}
	return map[string]schema{
		"WorkflowDefinition":                   definition,
		"WorkflowDefinitionVersion":            version,
		"WorkflowDefinitionResponse":           data(ref("WorkflowDefinition")),
		"WorkflowDefinitionVersionResponse":    data(ref("WorkflowDefinitionVersion")),
		"WorkflowDefinitionCollectionResponse": list("WorkflowDefinition"),
		"WorkflowDefinitionInvalidResponse": described(schema{"allOf": []any{ref("ErrorEnvelope"), object([]string{"data"}, schema{"data": object([]string{"issues"}, schema{"issues": arrayOf(issue)})})}},
			"An ErrorEnvelope with code definition_invalid; data.issues (and error.details) list every problem of the YAML."),
		"WorkflowRun":                   run,
		"WorkflowApproval":              approval,
		"ManagedExecutor":               executor,
		"Lease":                         lease,
		"WorkflowRunResponse":           data(ref("WorkflowRun")),
		"WorkflowRunCollectionResponse": list("WorkflowRun"),
		"WorkflowRunEventCollectionResponse": object([]string{"data", "meta"}, schema{"data": arrayOf(object([]string{"seq", "run_id", "kind", "actor", "at"}, schema{
			"seq": tInt(), "run_id": tString(), "kind": tString(), "actor": tString(), "at": tString(), "data": tObject()})), "meta": ref("ListMeta")}),
		"WorkflowApprovalResponse":          data(ref("WorkflowApproval")),
		"ManagedExecutorResponse":           data(ref("ManagedExecutor")),
		"ManagedExecutorCollectionResponse": list("ManagedExecutor"),
		"LeaseResponse":                     data(ref("Lease")),
		"LeaseHeartbeatResponse":            data(object([]string{"expires_at", "cancel_requested", "status"}, schema{"expires_at": tString(), "cancel_requested": typ("boolean"), "status": tString()})),
		"LeaseEventsResponse":               data(object([]string{"appended"}, schema{"appended": tInt()})),
		"WorkflowRunViewResponse":           described(data(tObject()), "A view computed from the run's history."),
		"WorkflowRunAuditPacketResponse":    described(data(tObject()), "The audit packet; signed (an evidence envelope) when the server has an evidence key."),
	}
}
