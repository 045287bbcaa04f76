package api

// The JSON Schemas (2020-12, the dialect of OpenAPI 3.1) of every request
// shape the spec gives, plus the response and error shapes. They are the
// single source for request validation and for the components of the
// OpenAPI document. Fields marked † in the spec (nullable or union types)
// are never required, because the spec leaves their required flag unshown.

import (
	"strings"

	"reeve.dev/reeve/server/sdk"
)

type schema = map[string]any

func ref(name string) schema { return schema{"$ref": "#/components/schemas/" + name} }

func typ(types ...string) schema {
	if len(types) == 1 {
		return schema{"type": types[0]}
	}
	list := make([]any, len(types))
	for i, t := range types {
		list[i] = t
	}
	return schema{"type": list}
}

func enum(values ...string) schema {
	list := make([]any, len(values))
	for i, v := range values {
		list[i] = v
	}
	return schema{"type": "string", "enum": list}
}

func arrayOf(items schema) schema { return schema{"type": "array", "items": items} }

// orNull makes s accept null as well (the † "X or null" fields).
func orNull(s schema) schema {
	return schema{"anyOf": []any{s, schema{"type": "null"}}}
}

func object(required []string, props schema) schema {
	s := schema{"type": "object", "properties": props}
	if len(required) > 0 {
		list := make([]any, len(required))
		for i, r := range required {
			list[i] = r
		}
		s["required"] = list
	}
	return s
}

func described(s schema, d string) schema { s["description"] = d; return s }

// closed refuses the fields s does not name (a nested shape of a typed
// body that must not carry anything unseen, such as an access rule).
func closed(s schema) schema { s["additionalProperties"] = false; return s }

var (
	tString     = func() schema { return typ("string") }
	tStringNull = func() schema { return typ("string", "null") }
	tInt        = func() schema { return typ("integer") }
	tIntNull    = func() schema { return typ("integer", "null") }
	tObject     = func() schema { return typ("object") }
	// "object or array, or null"
	tObjArrNull = func() schema { return typ("object", "array", "null") }
)

// requestSchemas are the request bodies of spec 4.1 to 4.12 plus the few
// the service defines where the spec shows none.
func requestSchemas() map[string]schema {
	sessionRoles := []string{"viewer", "commenter", "steerer", "approver", "owner"}
	strOrInt := func() schema { return typ("string", "integer") }
	m := map[string]schema{
		"PlaceholderRequest": described(tObject(), "Placeholder request body (spec 4.0): any JSON object; the shape is not yet tightened."),

		// 4.1 (bodies not shown in the spec; these are the service's own).
		"ApiTokenCreateRequest": object([]string{"name"}, schema{
			"name":            schema{"type": "string", "minLength": 1, "maxLength": 200},
			"expires_in_days": schema{"type": "integer", "minimum": 1, "maximum": 3650},
		}),

		"LoginRequest": object([]string{"code"}, schema{"code": described(schema{"type": "string", "minLength": 1, "maxLength": 200}, "The one-time login code (rvl_...), as in the link's code parameter.")}),

		// 4.3
		"WorkspaceCreateRequest": described(object([]string{"name"}, schema{
			"name":        schema{"type": "string", "minLength": 1, "maxLength": 200},
			"description": tStringNull(),
		}), "The spec does not show the createWorkspace body; name is the only field the service needs."),
		"WorkspaceUpdateRequest": object(nil, schema{
			"name":                 schema{"type": "string", "minLength": 1, "maxLength": 200},
			"description":          tStringNull(),
			"labels":               tObjArrNull(),
			"policy_mode":          enum("open_access", "allowlist", "crypto_pairing"),
			"notification_policy":  tObjArrNull(),
			"budget_policy":        budgetPolicySchema(),
			"audit_retention_days": described(schema{"type": []any{"integer", "null"}, "minimum": 1, "maximum": maxRetentionDays}, "Days audit entries are kept (1 to 36500); null keeps them forever."),
		}),
		"MemberUpdateRequest": described(object([]string{"role"}, schema{
			"role": enum("owner", "admin", "member"),
		}), "Changes a member's workspace role."),
		"MemberTransferOwnerRequest": described(object([]string{"user_id"}, schema{
			"user_id": tInt(),
		}), "Makes another member the owner; the caller becomes an admin."),
		"InvitationCreateRequest": described(object([]string{"email", "role"}, schema{
			"email":            schema{"type": "string", "minLength": 3, "maxLength": 320, "pattern": "^[^@\\s<>]+@[^@\\s<>]+$"},
			"role":             enum("owner", "admin", "member"),
			"expires_in_hours": schema{"type": "integer", "minimum": 1, "maximum": 720},
		}), "Invites an email with a workspace role; the accept link expires after expires_in_hours (default 168)."),
		"SessionSyncRequest": described(object([]string{"session", "events"}, schema{
			"session": object([]string{"id", "agent", "status", "created_at", "updated_at"}, schema{
				"id": schema{"type": "string", "minLength": 1, "maxLength": 100}, "directory_name": schema{"type": "string", "maxLength": 500},
				"agent": schema{"type": "string", "maxLength": 100}, "model": schema{"type": "string", "maxLength": 200},
				"status": schema{"type": "string", "maxLength": 50}, "turns": schema{"type": "integer", "minimum": 0},
				"worktree_branch": schema{"type": "string", "maxLength": 500}, "created_at": tString(), "updated_at": tString(), "ended_at": tStringNull(),
				"policy_hash": schema{"type": "string", "maxLength": 200}, "current_policy_hash": schema{"type": "string", "maxLength": 200},
				"mode": schema{"type": "string", "maxLength": 50}, "guarded": typ("boolean"),
				"agent_version": schema{"type": "string", "maxLength": 100},
				"command_line":  schema{"type": "array", "maxItems": 100, "items": schema{"type": "string", "maxLength": 4096}},
				"evidence_files": schema{"type": "array", "maxItems": 50, "items": object([]string{"role", "path", "sha256"}, schema{
					"role": schema{"type": "string", "maxLength": 50}, "path": schema{"type": "string", "maxLength": 4096},
					"sha256": schema{"type": "string", "pattern": "^[0-9a-f]{64}$"}, "size": schema{"type": "integer", "minimum": 0},
				})},
				"access": described(closed(object(nil, schema{
					"default_role": enum("none", "viewer", "operator", "approver", "admin"),
					"members": schema{"type": "array", "maxItems": sdk.MaxProjectAccessMembers, "items": closed(object([]string{"role"}, schema{
						"user": schema{"type": "string", "maxLength": sdk.MaxProjectAccessName}, "team": schema{"type": "string", "maxLength": sdk.MaxProjectAccessName},
						"role": enum("viewer", "operator", "approver", "admin"),
					}))},
					"invalid": schema{"type": "string", "maxLength": sdk.MaxProjectAccessInvalid},
				})), "The project's .reeve/access.yaml, when the session's checkout has one: every member's role on the session is capped by it, as on the daemon (viewer → viewer, operator → steerer, approver → approver, admin → owner; unlisted → default_role, viewer when unset). invalid, when set, says why the file does not validate, and refuses everyone."),
			}),
			"upload_mode": enum("full", "redacted", "metadata"),
			"events": schema{"type": "array", "maxItems": 500, "items": object([]string{"seq", "kind", "ts"}, schema{
				"seq": schema{"type": "integer", "minimum": 1}, "kind": schema{"type": "string", "maxLength": 100}, "ts": tString(), "data": schema{},
			})},
		}), "A daemon session and up to 500 consecutive events of its log; the body limit (1 MiB) applies too."),
		"ShareGroupMemberRequest": described(object([]string{"user_id"}, schema{"user_id": tInt()}), "A workspace member to add to a share group."),
		"InvitationAcceptRequest": described(object([]string{"token"}, schema{
			"token": schema{"type": "string", "minLength": 1, "maxLength": 200},
		}), "The token of an accept link."),
		"InstallCreateRequest": described(object(nil, schema{
			"name": schema{"type": "string", "maxLength": 200},
		}), "Registers a machine; the answer carries its issue token once."),

		// 4.4
		"RoutingCandidateInput":                  described(tObject(), "Fields not shown in the spec."),
		"SessionTeamScopeInput":                  described(tObject(), "Fields not shown in the spec."),
		"AgentSessionCollaborationActor":         described(tObject(), "Fields not shown in the spec."),
		"AgentSessionCollaborationCommentTarget": described(tObject(), "Fields not shown in the spec."),
		"AgentSessionCreateRequest": object([]string{"title", "source_kind"}, schema{
			"title":                    tString(),
			"summary":                  tStringNull(),
			"source_kind":              tString(),
			"source_ref":               tStringNull(),
			"primary_surface":          tString(),
			"selected_target_repo_ids": arrayOf(tString()),
			"primary_owning_team_id":   tStringNull(),
			"budget_owner_team_id":     tStringNull(),
			"visibility_scope":         enum("workspace", "team", "private"),
			"effective_policy_hash":    tStringNull(),
			"policy_source_refs":       arrayOf(tString()),
			"data_plane_profile_id":    tStringNull(),
			"metadata":                 tObject(),
			"routing_candidates":       arrayOf(ref("RoutingCandidateInput")),
			"team_scopes":              arrayOf(ref("SessionTeamScopeInput")),
		}),
		"AgentSessionAccessShareRequest": object([]string{"subject_type", "subject_id", "role"}, schema{
			"subject_type": enum("user", "team", "share_group"),
			"subject_id":   tInt(),
			"role":         enum(sessionRoles...),
		}),
		"AgentSessionAccessRequestCreateRequest": object([]string{"requested_role"}, schema{
			"requested_role": enum("viewer", "commenter", "steerer", "approver"),
			"reason":         tStringNull(),
		}),
		"AgentSessionAccessRequestDecisionRequest": object([]string{"decision"}, schema{
			"decision": enum("approve", "deny"),
			"role":     tStringNull(),
			"reason":   tStringNull(),
		}),
		"AgentSessionCollaborationEventStoreRequest": object([]string{"event_kind"}, func() schema {
			p := schema{
				"event_kind":   enum("task_created", "task_assigned", "task_reassigned", "task_status_changed", "mailbox_message_sent", "comment_created"),
				"dependencies": typ("array", "null"),
				"assignees":    typ("array", "null"),
				"assignee":     orNull(ref("AgentSessionCollaborationActor")),
				"recipient":    orNull(ref("AgentSessionCollaborationActor")),
				"target":       orNull(ref("AgentSessionCollaborationCommentTarget")),
			}
			for _, f := range []string{"task_id", "title", "description", "status", "previous_status", "subject", "thread_id", "body_ciphertext", "body_digest", "body_plaintext"} {
				p[f] = tStringNull()
			}
			return p
		}()),
		"AgentSessionContextCorrectionCreateRequest": object([]string{"correction_kind", "target_kind", "title"}, schema{
			"context_source_id": strOrInt(),
			"correction_kind":   enum("missing_context", "stale_context", "wrong_context", "new_memory", "promote_to_policy"),
			"target_kind":       enum("memory_candidate", "config_candidate"),
			"title":             tString(),
			"summary":           tStringNull(),
			"proposed_text":     tStringNull(),
			"metadata":          tObject(),
		}),
		"AgentSessionMemoryRetrievalRequest": object([]string{"query"}, schema{
			"query":              tString(),
			"limit":              tInt(),
			"context_source_ids": arrayOf(tString()),
		}),
		"RoutingDecisionCreateRequest": object([]string{"decision_kind"}, schema{
			"selected_routing_candidate_id": tStringNull(),
			"decision_kind":                 enum("confirmed", "corrected", "rejected", "needs_more_info"),
			"confidence":                    typ("number", "null"),
			"reason":                        tStringNull(),
			"metadata":                      tObject(),
		}),
		"AgentSessionRunAttemptRequest": object(nil, schema{
			"managed_executor_id": tStringNull(),
		}),
		"SessionVerificationAttemptCreateRequest": object([]string{"status"}, schema{
			"workflow_run_id":       tStringNull(),
			"attempt_kind":          enum("verification", "repair_verification", "manual_review"),
			"status":                enum("passed", "failed", "needs_review", "error"),
			"verification_pack":     tObject(),
			"summary":               tStringNull(),
			"artifact_refs":         arrayOf(tString()),
			"repair_recommendation": tObject(),
		}),
		"SessionVerificationPackResolveRequest": object(nil, schema{
			"workflow_run_id": tStringNull(),
		}),
		"SessionVerificationRepairHandoffCreateRequest": object([]string{"verification_attempt_id"}, schema{
			"verification_attempt_id": tString(),
			"requested_action":        described(tString(), "An enum whose values the spec does not show; any string is accepted until they are."),
		}),

		// 4.6
		"BillingCheckoutSessionRequest": object(nil, schema{"success_url": tString(), "cancel_url": tString()}),
		"BillingPortalSessionRequest":   object(nil, schema{"return_url": tString()}),

		// 4.7
		"CreateProviderKeyRequest": object([]string{"provider", "mode"}, schema{
			"provider": enum("provider_a", "provider_b", "provider_c", "other"),
			"mode":     enum("managed_byok", "managed_pass_through"),
			"team_id":  tIntNull(),
			"key_ref":  tStringNull(),
			"secret":   described(tString(), "A secret value (8 to 4096 characters, no spaces); stored sealed under the master key, never echoed. Required for managed_byok."),
		}),
		"RotateProviderKeyRequest": object(nil, schema{
			"secret": described(tString(), "The new secret; required for managed_byok. Never echoed."),
		}),
		"ProviderKeyMaterialRequest": object([]string{"provider_key_id", "run_id"}, schema{
			"provider_key_id": tString(),
			"run_id":          described(tString(), "A workflow run of the workspace that a worker holds now."),
			"lease_id":        described(tString(), "When given, the run's current lease."),
		}),

		// 4.8
		"SupportAccessRequestCreateRequest": object([]string{"reason", "requested_scopes"}, schema{
			"reason":             tString(),
			"requested_scopes":   arrayOf(enum("operational_status", "billing_read", "run_read", "audit_read", "memory_metadata_read")),
			"expires_in_minutes": tInt(),
		}),
		"SupportAccessDecisionRequest": object(nil, schema{
			"expires_in_minutes": tInt(),
			"decision_reason":    tStringNull(),
		}),

		// 4.10
		"WorkflowRunPreflightRequest": func() schema {
			p := schema{
				"workflow_digest":     tStringNull(),
				"yaml_snapshot":       tStringNull(),
				"status":              enum("queued", "draft", "blocked"),
				"data_capture_policy": typ("object", "null"),
			}
			for _, f := range []string{"workflow_definition_id", "workflow_version_id", "workflow_route_id", "workflow_route_version_id", "workflow_execution_profile_id", "workflow_execution_profile_version_id", "integration_event_id", "runtime_target_id", "managed_executor_id"} {
				p[f] = strOrInt()
			}
			return object(nil, p)
		}(),

		// 4.11
		"GatewayUsageRecordRequest": object([]string{"gateway_virtual_key_id", "idempotency_key", "run_id", "lease_id", "provider", "model", "input_tokens", "output_tokens", "total_tokens", "cost_usd"}, schema{
			"gateway_virtual_key_id": tString(),
			"idempotency_key":        tString(),
			"run_id":                 tString(),
			"lease_id":               tString(),
			"team_ref":               tStringNull(),
			"provider":               enum("provider_a", "provider_b", "provider_d"),
			"model":                  tString(),
			"input_tokens":           tInt(),
			"output_tokens":          tInt(),
			"total_tokens":           tInt(),
			"cost_usd":               schema{"type": "string", "pattern": `^[0-9]+(\.[0-9]+)?$`},
			"latency_ms":             tIntNull(),
			"status":                 tStringNull(),
			"error_code":             tStringNull(),
			"occurred_at":            tStringNull(),
		}),

		// Pairing (spec 4.2 shows no bodies; these are the service's own).
		"PairingCodeCreateRequest": described(object([]string{"anchor_public_key"}, schema{
			"name":              schema{"type": "string", "maxLength": 200},
			"anchor_public_key": described(schema{"type": "string", "maxLength": 64}, "The daemon's X25519 trust-anchor public key (32 bytes, standard base64); its fingerprint identifies the machine."),
			"worker":            typ("boolean"),
			"transport":         enum("polling", "relay"),
		}), "A daemon describes itself as it mints a code; the approval page shows the name and anchor fingerprint."),
		"PairingCodeClaimRequest": described(object(nil, schema{
			"name":              schema{"type": "string", "maxLength": 200},
			"anchor_public_key": described(schema{"type": "string", "maxLength": 64}, "Browser-minted codes: the claiming daemon's X25519 anchor public key (required)."),
			"worker":            typ("boolean"),
			"transport":         enum("polling", "relay"),
			"workspace":         described(tString(), "Daemon-minted codes: the workspace (ULID) the claiming user pairs the machine to."),
		}), "Claims a pairing code."),
		"WorkspacePairingCodeRequest": described(object(nil, schema{
			"expires_in_seconds": described(schema{"type": "integer", "minimum": 1, "maximum": 3600}, "Lifetime of the code; default 900."),
		}), "Mints a code for the workspace; the daemon claims it with `reeve pair CODE`."),
		"PairingDecisionRequest": described(object(nil, schema{
			"workspace": described(tString(), "Daemon-minted codes not yet claimed: the workspace (ULID) to pair the machine to."),
		}), "Approves or denies a pairing code."),
		"RelayValidateRequest": described(object(nil, schema{
			"workspace_id":      tString(),
			"runtime_target_id": tString(),
			"role":              enum("workspace-daemon", "client"),
		}), "What the relay wants to admit; checked against the JWT claims."),
	}
	// cost_usd is a decimal string; the spec types it as a string.
	for k, v := range contextVaultRequestSchemas() {
		m[k] = v
	}
	for k, v := range teamResourceRequestSchemas() {
		m[k] = v
	}
	for k, v := range integrationRequestSchemas() {
		m[k] = v
	}
	for k, v := range integrationEventRequestSchemas() {
		m[k] = v
	}
	for k, v := range workflowRequestSchemas() { // overrides the run-attempt and preflight bodies
		m[k] = v
	}
	for k, v := range insightRequestSchemas() { // insights_schemas.go
		m[k] = v
	}
	// A typed body names all its fields: an unknown one is refused (422),
	// so nothing — a secret least of all — is stored unseen. Placeholder
	// bodies (spec 4.0) stay open, and so do the items nested in bodies
	// (*Input), which clients fill from the records they read.
	for k, v := range m {
		if _, typed := v["properties"]; typed && k != "PlaceholderRequest" && strings.HasSuffix(k, "Request") {
			v["additionalProperties"] = false
		}
	}
	return m
}

// responseSchemas are the answer and error shapes. Named responses whose
// fields the spec does not show are records of the generic engine.
func responseSchemas() map[string]schema {
	m := map[string]schema{
		"ErrorDetail": object([]string{"field", "message"}, schema{
			"field":   described(tString(), "JSON pointer into the body, query:<name> for a parameter, empty for the whole body."),
			"message": tString(),
		}),
		"ErrorEnvelope": object([]string{"error"}, schema{
			"error": object([]string{"code", "message", "details", "request_id"}, schema{
				"code":       described(tString(), "Stable machine-readable code (see docs/server.md)."),
				"message":    tString(),
				"details":    arrayOf(ref("ErrorDetail")),
				"request_id": tString(),
			}),
		}),
		"Record": object([]string{"id", "collection", "workspace_id", "seq", "attributes", "created_by", "created_at", "updated_at"}, schema{
			"id":           tString(),
			"collection":   tString(),
			"workspace_id": tString(),
			"seq":          tInt(),
			"attributes":   tObject(),
			"created_by":   tString(),
			"created_at":   schema{"type": "string", "format": "date-time"},
			"updated_at":   schema{"type": "string", "format": "date-time"},
		}),
		"ListMeta": object([]string{"count"}, schema{"count": tInt(), "next_after": tInt()}),
		"GenericApiResponse": described(object([]string{"data"}, schema{
			"data": typ("object", "array"),
			"meta": ref("ListMeta"),
		}), "Placeholder answer (spec 4.0): data is a record, a list of records or an action result."),
		"RecordResponse":           object([]string{"data"}, schema{"data": ref("Record")}),
		"RecordCollectionResponse": object([]string{"data", "meta"}, schema{"data": arrayOf(ref("Record")), "meta": ref("ListMeta")}),
		"Invitation": object([]string{"id", "workspace_id", "email", "role", "state", "expires_at", "invited_by", "created_at"}, schema{
			"id": tString(), "workspace_id": tString(), "email": tString(), "role": enum("owner", "admin", "member"),
			"state":      enum("pending", "accepted", "revoked", "expired"),
			"expires_at": schema{"type": "string", "format": "date-time"}, "invited_by": tString(),
			"accepted_by": tInt(), "accepted_at": schema{"type": "string", "format": "date-time"},
			"revoked_at": schema{"type": "string", "format": "date-time"}, "created_at": schema{"type": "string", "format": "date-time"},
		}),
		"InvitationResponse":           object([]string{"data"}, schema{"data": ref("Invitation")}),
		"InvitationCollectionResponse": object([]string{"data", "meta"}, schema{"data": arrayOf(ref("Invitation")), "meta": ref("ListMeta")}),
		"InvitationCreatedResponse": described(object([]string{"data", "token", "accept_url"}, schema{"data": ref("Invitation"), "token": tString(), "accept_url": tString()}),
			"The new invitation; token and accept_url are shown this once."),
		"InvitationAcceptedResponse": object([]string{"data"}, schema{"data": object([]string{"workspace_id", "role", "user_id", "invitation_id"}, schema{
			"workspace_id": tString(), "workspace_name": tString(), "role": enum("owner", "admin", "member"), "user_id": tInt(), "invitation_id": tString(),
		})}),
		"SessionSyncResponse": object([]string{"data"}, schema{"data": object([]string{"session_id", "acked_seq", "stored", "duplicate"}, schema{
			"session_id": tString(), "acked_seq": tInt(), "stored": tInt(), "duplicate": tInt(),
		})}),
		"EvidenceSigned": described(object([]string{"format", "alg", "kid", "payload", "signature"}, schema{
			"format": enum("reeve-evidence/1"), "alg": enum("EdDSA"),
			"kid":       described(tString(), "The signing key in /api/.well-known/jwks.json."),
			"payload":   described(tString(), "base64url of the bundle JSON: format, kind, workspace_id, session_id, issued_at, session, events (seq, kind, at, digest, chain, payload for traces), decisions, chain_head."),
			"signature": described(tString(), "base64url Ed25519 signature of the payload bytes."),
		}), "A signed evidence bundle; `reeve evidence verify FILE` checks it offline."),
		"AgentSessionReceiptExportResponse":     described(object([]string{"data"}, schema{"data": ref("EvidenceSigned")}), "Signed receipt: the session record, its events' digests in a hash chain, and its decisions."),
		"AgentSessionTraceExportResponse":       described(object([]string{"data"}, schema{"data": ref("EvidenceSigned")}), "Signed trace: as the receipt, with each event's redacted payload."),
		"AgentSessionComputeEvidenceResponse":   described(object([]string{"data"}, schema{"data": tObject()}), "The session and its events with secret-looking values masked."),
		"AgentSessionSupportDebugResponse":      described(object([]string{"data"}, schema{"data": tObject()}), "What support may see: the redacted session, its last 200 redacted events, its visibility and ACL size."),
		"AgentSessionApprovalAuditResponse":     described(object([]string{"data"}, schema{"data": tObject()}), "Every hook decision of the session: tool, decision, who or what decided (policy:<rule>, session-rule, mode, human, timeout), reason, and the command or path."),
		"AgentSessionGuardrailEvidenceResponse": described(object([]string{"data"}, schema{"data": tObject()}), "The decisions a policy made or that denied a tool use."),
		"AgentSessionGovernanceResponse":        described(object([]string{"data"}, schema{"data": tObject()}), "Effective policy hash, mode, guarded flag and decision counts."),
		"AgentSessionSpendResponse":             described(object([]string{"data"}, schema{"data": tObject()}), "Usage and cost per turn, and totals."),
		"AgentSessionAdapterReceiptsResponse":   described(object([]string{"data"}, schema{"data": tObject()}), "Agent, model, install and the event kinds the adapter produced."),
		"AgentSessionMcpToolsResponse":          described(object([]string{"data"}, schema{"data": tObject()}), "The MCP tools the session called, by server, with call counts."),
		"AgentSessionReadinessResponse":         described(object([]string{"data"}, schema{"data": tObject()}), "Status, pending permissions, sync position and last event."),
		"MemberCollectionResponse":              object([]string{"data", "meta"}, schema{"data": arrayOf(ref("Member")), "meta": ref("ListMeta")}),
		"Member":                                object([]string{"user_id", "email", "role"}, schema{"user_id": tInt(), "email": tString(), "role": enum("owner", "admin", "member")}),
		"Workspace": object([]string{"id", "name", "policy_mode", "created_at", "updated_at"}, schema{
			"id":                   described(schema{"type": "string", "pattern": ulidPattern}, "ULID"),
			"name":                 tString(),
			"description":          tStringNull(),
			"labels":               tObjArrNull(),
			"policy_mode":          enum("open_access", "allowlist", "crypto_pairing"),
			"notification_policy":  tObjArrNull(),
			"budget_policy":        tObjArrNull(),
			"audit_retention_days": tIntNull(),
			"created_at":           schema{"type": "string", "format": "date-time"},
			"updated_at":           schema{"type": "string", "format": "date-time"},
			"role":                 described(enum("owner", "admin", "member"), "The caller's role."),
			"members":              arrayOf(ref("Member")),
		}),
		"WorkspaceResponse":           object([]string{"data"}, schema{"data": ref("Workspace")}),
		"WorkspaceCollectionResponse": object([]string{"data", "meta"}, schema{"data": arrayOf(ref("Workspace")), "meta": ref("ListMeta")}),
		"ApiToken": object([]string{"id", "name", "prefix", "created_at"}, schema{
			"id": tString(), "name": tString(), "prefix": tString(),
			"created_at":   schema{"type": "string", "format": "date-time"},
			"expires_at":   typ("string", "null"),
			"last_used_at": typ("string", "null"),
		}),
		"ApiTokenCollectionResponse": object([]string{"data", "meta"}, schema{"data": arrayOf(ref("ApiToken")), "meta": ref("ListMeta")}),
		"ApiTokenCreatedResponse": object([]string{"data"}, schema{"data": schema{
			"allOf": []any{ref("ApiToken"), object([]string{"token"}, schema{"token": described(tString(), "The plaintext; returned only here.")})},
		}}),
		"LoginResponse": object([]string{"data"}, schema{"data": object([]string{"token", "token_type", "expires_at", "user"}, schema{
			"token": tString(), "token_type": enum("bearer"), "expires_at": schema{"type": "string", "format": "date-time"},
			"user": object([]string{"id", "email"}, schema{"id": tInt(), "email": tString()}),
		})}),
		"Install": object([]string{"id", "workspace_id", "name", "created_at"}, schema{
			"id": tString(), "workspace_id": tString(), "name": tString(),
			"created_at":         schema{"type": "string", "format": "date-time"},
			"last_seen_at":       typ("string", "null"),
			"issue_token":        described(tString(), "Only in the answer that created the install."),
			"anchor_fingerprint": described(tString(), "Fingerprint of the paired machine's X25519 trust anchor: the machine's identity."),
			"anchor_public_key":  described(tString(), "The anchor public key, standard base64."),
			"worker":             typ("boolean"),
			"transport":          tString(),
		}),
		"InstallResponse":           object([]string{"data"}, schema{"data": ref("Install")}),
		"InstallCollectionResponse": object([]string{"data", "meta"}, schema{"data": arrayOf(ref("Install")), "meta": ref("ListMeta")}),
		"RelayTokenResponse": object([]string{"data"}, schema{"data": object([]string{"token", "expires_at", "relay_url"}, schema{
			"token": tString(), "expires_at": schema{"type": "string", "format": "date-time"}, "relay_url": tString(),
		})}),
		"Health": object([]string{"status", "version"}, schema{"status": enum("ok"), "version": tString(),
			"database": object([]string{"engine", "status", "schema_version", "latency_ms"}, schema{
				"engine": enum("sqlite", "postgres"), "status": enum("ok"), "schema_version": tInt(), "latency_ms": typ("number"),
			})}),
		"Discovery": object([]string{"api_url", "app_url", "relay_url", "openapi_url", "login_url", "version"}, schema{
			"api_url": tString(), "app_url": tString(), "relay_url": tString(), "openapi_url": tString(), "login_url": tString(), "version": tString(),
		}),
		"OpenApiDocument": described(tObject(), "This document."),
		"AuditCollectionResponse": object([]string{"data", "meta"}, schema{"data": arrayOf(object(nil, schema{
			"seq": tInt(), "id": tString(), "actor": tString(), "action": tString(), "target": tString(), "detail": schema{}, "created_at": tString(),
		})), "meta": ref("ListMeta")}),
		"WorkflowRunPreflightResponse": object([]string{"data"}, schema{"data": ref("WorkflowRunPreflight")}),
		"WorkflowRunPreflight": object([]string{"runnable", "issues"}, schema{
			"runnable": typ("boolean"),
			"issues":   arrayOf(object([]string{"code", "message"}, schema{"code": tString(), "message": tString(), "field": tString()})),
			"advisories": described(arrayOf(object([]string{"code", "message"}, schema{"code": tString(), "message": tString(), "field": tString()})),
				"Advice that does not make the run unrunnable (extension): runner_pool_unserved when no worker of a fitting managed executor has claimed for the run's runner pool in the last 5 minutes."),
		}),
		"WorkflowRunPreflightNotRunnableResponse": described(schema{"allOf": []any{ref("ErrorEnvelope"), ref("WorkflowRunPreflightResponse")}},
			"WorkflowRunPreflightResponse carried inside an ErrorEnvelope: error.details lists the readiness issues too."),
		"GatewayUsageAdmissionDeniedResponse": described(schema{"allOf": []any{ref("ErrorEnvelope"), object(nil, schema{"data": object(nil, schema{"reason": enum("billing_inactive", "hard_cap_exceeded", "budget_policy_invalid")})})}},
			"An ErrorEnvelope with code admission_denied; nothing was written to the ledger."),
		"PairingCodeResponse": object([]string{"data"}, schema{"data": object([]string{"code", "state", "approved", "initiator", "workspace_id", "expires_at", "approval_url", "machine", "relay_credentials"}, schema{
			"code": tString(), "state": enum("pending", "claimed", "approved", "denied"), "expires_at": schema{"type": "string", "format": "date-time"},
			"approved":     typ("boolean"),
			"initiator":    enum("browser", "daemon"),
			"workspace_id": tStringNull(),
			"approval_url": described(tString(), "{app_url}/pair?code=..., where a signed-in admin approves or denies."),
			"machine": orNull(object([]string{"name", "anchor_fingerprint", "worker", "transport"}, schema{
				"name": tString(), "anchor_fingerprint": tString(), "worker": typ("boolean"), "transport": tString(),
			})),
			"install_id":        described(tString(), "The install an approval created."),
			"status_token":      described(tString(), "Returned once, to the daemon that will poll: the one that minted the code, or claimed a browser-minted one."),
			"relay_credentials": described(orNull(ref("RelayCredentials")), "Only in the first status answer after approval: the issue token's only copy."),
		})}),
		"RelayCredentials": object([]string{"install_id", "workspace_id", "issue_token", "relay_url", "server_url", "app_url"}, schema{
			"install_id": tString(), "workspace_id": tString(), "issue_token": tString(), "relay_url": tString(), "server_url": tString(), "app_url": tString(),
		}),
		"RelayValidateResponse": object([]string{"data"}, schema{"data": object([]string{"valid", "workspace_id", "role", "subject"}, schema{
			"valid": typ("boolean"), "workspace_id": tString(), "role": tString(), "subject": tString(), "runtime_target_id": tString(),
		})}),
	}
	for k, v := range contextVaultResponseSchemas() {
		m[k] = v
	}
	for k, v := range teamResourceResponseSchemas() {
		m[k] = v
	}
	for k, v := range moneyResponseSchemas() {
		m[k] = v
	}
	for k, v := range workflowResponseSchemas() {
		m[k] = v
	}
	for k, v := range insightResponseSchemas() { // insights_schemas.go
		m[k] = v
	}
	return m
}

const ulidPattern = "^[0-9A-HJKMNP-TV-Z]{26}$"
