package api

// The context vault's request and response schemas (docs/context-vault.md).

func contextVaultRequestSchemas() map[string]schema {
	name := func() schema { return schema{"type": "string", "minLength": 1, "maxLength": 200} }
	text := func(n int) schema { return schema{"type": "string", "maxLength": n} }
	id := func() schema { return schema{"type": "string", "minLength": 1, "maxLength": 64} }
	epoch := func() schema { return schema{"type": "integer", "minimum": 1} }
	wrap := object([]string{"vault_id", "epoch", "device_id", "wrapped"}, schema{
		"vault_id": id(), "epoch": epoch(), "device_id": id(),
		"wrapped": described(text(16384), "The epoch key wrapped to the device with age (base64), signed by the sending device inside the wrap."),
	})
	wraps := func() schema {
		return schema{"type": "array", "items": ref("ContextWrappedKeyInput"), "maxItems": 10000}
	}
	descriptor := described(text(2000), "Server-visible descriptor metadata.")
	return map[string]schema{
		"ContextSourceCreateRequest": described(object([]string{"name"}, schema{
			"kind":        enum("vault", "git"),
			"name":        name(),
			"description": text(2000),
			"use_when":    described(text(2000), "When the source's entries matter: `always`, `path:GLOB`, or words; separated by `;`. Server-visible."),
			"update_when": described(text(2000), "When they need revising. Server-visible."),
			"repo_url":    described(text(2000), "A git source's repository (required for kind git)."),
			"provider":    text(100),
			"branch":      text(200),
		}), "Creates a vault (default) or a git source of markdown."),
		"ContextSourceUpdateRequest": object(nil, schema{
			"kind":               enum("vault", "git"),
			"name":               name(),
			"description":        text(2000),
			"use_when":           descriptor,
			"update_when":        descriptor,
			"repo_url":           text(2000),
			"provider":           text(100),
			"branch":             text(200),
			"state":              enum("active", "archived"),
			"rotation_requested": described(typ("boolean"), "Ask the vault's devices to rotate its epoch at their next rotations-process."),
		}),
		"ContextWrappedKeyInput": wrap,
		"ContextEnrollRequest": object([]string{"recipient", "signing_key"}, schema{
			"name":        text(200),
			"recipient":   described(text(200), "The device's age X25519 recipient (age1...)."),
			"signing_key": described(text(100), "The device's Ed25519 public key, standard base64."),
		}),
		"ContextApproveRequest": object([]string{"fingerprint"}, schema{
			"fingerprint": described(text(100), "The fingerprint the new device printed, as the approver compared it."),
			"keys":        wraps(),
		}),
		"ContextEpochRequest": object([]string{"epoch", "keys"}, schema{
			"epoch":  epoch(),
			"reason": text(200),
			"keys":   wraps(),
		}),
		"ContextEventInput": object([]string{"event_id", "entry_id", "kind"}, schema{
			"event_id":    id(),
			"entry_id":    id(),
			"kind":        enum("put", "delete", "doc"),
			"epoch":       schema{"type": "integer", "minimum": 0},
			"base":        schema{"type": "string", "maxLength": 64},
			"use_when":    descriptor,
			"update_when": descriptor,
			"path":        text(1024),
			"commit":      text(64),
			"ciphertext":  described(text(400000), "base64(nonce || XChaCha20-Poly1305 ciphertext); the header fields are its associated data."),
		}),
		"ContextPushRequest": object([]string{"vault_id", "events"}, schema{
			"vault_id": text(200),
			"events":   schema{"type": "array", "items": ref("ContextEventInput"), "minItems": 1, "maxItems": 500},
		}),
		"ContextPullRequest": object([]string{"vault_id"}, schema{
			"vault_id":  text(200),
			"after_seq": schema{"type": "integer", "minimum": 0},
			"limit":     schema{"type": "integer", "minimum": 1, "maximum": 1000},
		}),
		"ContextEmitRequest": object([]string{"vault_id"}, schema{
			"vault_id": text(200),
			"member": object(nil, schema{
				"user_id": tInt(), "email": text(320), "role": enum("owner", "member"),
			}),
			"keys": wraps(),
		}),
		"ContextMaterializedRequest": object([]string{"keys"}, schema{
			"keys": schema{"type": "array", "maxItems": 10000, "items": object([]string{"vault_id", "epoch"}, schema{"vault_id": id(), "epoch": epoch()})},
		}),
		"ContextRevokeRequest": object(nil, schema{
			"device_id": text(64), "vault_id": text(200), "user_id": tInt(), "email": text(320),
		}),
		"ContextPreviewRequest": object([]string{"vault_id", "candidate_digest", "base_seq"}, schema{
			"proposal_id":      text(64),
			"vault_id":         text(200),
			"candidate_digest": schema{"type": "string", "pattern": "^[0-9a-f]{64}$"},
			"base_seq":         schema{"type": "integer", "minimum": 0},
			"adds":             tInt(), "changes": tInt(), "duplicates": tInt(),
		}),
		"ContextWritebackRequest": object([]string{"proof_id", "candidate_digest"}, schema{
			"proof_id":         id(),
			"candidate_digest": schema{"type": "string", "pattern": "^[0-9a-f]{64}$"},
			"event_id":         text(64),
			"branch":           text(200),
			"url":              text(2000),
		}),
		"ContextDecisionRequest": object([]string{"decision"}, schema{
			"decision": enum("reject"),
			"reason":   text(2000),
		}),
		"ContextBackupRequest": object([]string{"sealed"}, schema{
			"sealed": described(schema{"type": "string", "minLength": 1, "maxLength": 65536}, "The device identity sealed with the recovery key (age scrypt, base64)."),
		}),
		"ContextRestoreRequest": object([]string{"device_id"}, schema{"device_id": id()}),
	}
}

func contextVaultResponseSchemas() map[string]schema {
	dataOf := func(s schema) schema { return object([]string{"data"}, schema{"data": s}) }
	listOf := func(item string) schema {
		return object([]string{"data", "meta"}, schema{"data": arrayOf(ref(item)), "meta": ref("ListMeta")})
	}
	ts := func() schema { return schema{"type": "string", "format": "date-time"} }
	source := object([]string{"id", "workspace_id", "kind", "name", "epoch", "head_seq", "state"}, schema{
		"id": tString(), "workspace_id": tString(), "kind": enum("vault", "git"), "name": tString(), "description": tString(),
		"use_when": tString(), "update_when": tString(), "repo_url": tString(), "provider": tString(), "branch": tString(),
		"head_commit": tString(), "sync_state": tString(), "epoch": tInt(), "head_seq": tInt(), "state": enum("active", "archived"),
		"rotation_due": typ("boolean"), "created_by": tString(), "created_at": ts(), "updated_at": ts(),
		"role":    described(tString(), "The caller's role in the source (owner or member), when a member."),
		"members": arrayOf(object(nil, schema{"user_id": tInt(), "email": tString(), "role": tString(), "state": tString(), "added_by": tString(), "added_at": ts(), "removed_at": ts()})),
	})
	device := object([]string{"id", "user_id", "recipient", "signing_key", "fingerprint", "state"}, schema{
		"id": tString(), "workspace_id": tString(), "user_id": tInt(), "install_id": tString(), "name": tString(),
		"recipient": tString(), "signing_key": tString(), "fingerprint": tString(),
		"state": enum("pending", "approved", "active", "revoked"), "approved_by": tString(),
		"created_at": ts(), "updated_at": ts(), "revoked_at": ts(),
	})
	key := object([]string{"vault_id", "epoch", "device_id", "wrapped"}, schema{
		"vault_id": tString(), "epoch": tInt(), "device_id": tString(), "wrapped": tString(), "wrapped_by": tString(),
		"state": enum("emitted", "materialized"), "created_at": ts(),
	})
	event := object([]string{"seq", "event_id", "entry_id", "kind", "epoch"}, schema{
		"seq": tInt(), "vault_id": tString(), "event_id": tString(), "entry_id": tString(), "kind": enum("put", "delete", "doc"),
		"epoch": tInt(), "base": tString(), "use_when": tString(), "update_when": tString(), "path": tString(), "commit": tString(),
		"ciphertext": tString(), "digest": tString(), "device_id": tString(), "created_at": ts(),
	})
	descriptor := object([]string{"context_source_id", "entry_id", "event_id", "score"}, schema{
		"context_source_id": tString(), "source_kind": tString(), "entry_id": tString(), "event_id": tString(), "seq": tInt(), "epoch": tInt(),
		"use_when": tString(), "update_when": tString(), "path": tString(), "score": typ("number"), "conflict": typ("boolean"),
		"ciphertext": described(tString(), "In retrieval answers: the sealed entry, for a device to open."),
	})
	proposal := object([]string{"id", "context_source_id", "state", "digest"}, schema{
		"id": tString(), "workspace_id": tString(), "context_source_id": tString(), "session_id": tString(),
		"correction_kind": tString(), "target_kind": tString(), "state": enum("pending", "previewed", "accepted", "rejected"),
		"digest": described(tString(), "SHA-256 of the sealed content."), "sealed": described(tString(), "Only to a device it was sealed to, while undecided."),
		"sealed_to": arrayOf(tString()), "proof_id": tString(), "event_id": tString(), "writeback": tString(),
		"created_by": tString(), "created_at": ts(), "decided_by": tString(), "decided_at": ts(), "reason": tString(),
	})
	return map[string]schema{
		"ContextSource":                            source,
		"ContextSourceResponse":                    dataOf(ref("ContextSource")),
		"ContextSourceCollectionResponse":          listOf("ContextSource"),
		"ContextDevice":                            device,
		"ContextDeviceResponse":                    dataOf(ref("ContextDevice")),
		"ContextDeviceCollectionResponse":          listOf("ContextDevice"),
		"ContextWrappedKey":                        key,
		"ContextWrappedKeyCollectionResponse":      listOf("ContextWrappedKey"),
		"ContextDeviceVault":                       schema{"allOf": []any{ref("ContextSource"), object(nil, schema{"keys": arrayOf(ref("ContextWrappedKey")), "recipients": arrayOf(ref("ContextDevice")), "pending_proposals": tInt()})}},
		"ContextDeviceVaultResponse":               dataOf(ref("ContextDeviceVault")),
		"ContextDeviceVaultCollectionResponse":     listOf("ContextDeviceVault"),
		"ContextEpoch":                             object(nil, schema{"vault_id": tString(), "epoch": tInt(), "created_by_device": tString(), "reason": tString(), "recipients": tInt(), "created_at": ts()}),
		"ContextEpochResponse":                     dataOf(ref("ContextEpoch")),
		"ContextEpochCollectionResponse":           listOf("ContextEpoch"),
		"ContextEvent":                             event,
		"ContextPushResponse":                      dataOf(object([]string{"accepted", "head_seq"}, schema{"accepted": arrayOf(object(nil, schema{"event_id": tString(), "seq": tInt(), "duplicate": typ("boolean")})), "head_seq": tInt()})),
		"ContextPullResponse":                      dataOf(object([]string{"events", "head_seq", "more"}, schema{"events": arrayOf(ref("ContextEvent")), "head_seq": tInt(), "more": typ("boolean")})),
		"ContextGrantObligationCollectionResponse": object([]string{"data", "meta"}, schema{"data": arrayOf(object(nil, schema{"vault_id": tString(), "epoch": tInt(), "device": ref("ContextDevice")})), "meta": ref("ListMeta")}),
		"ContextRevocationCollectionResponse":      object([]string{"data", "meta"}, schema{"data": arrayOf(object(nil, schema{"vault_id": tString(), "kind": enum("device", "member"), "device_id": tString(), "user_id": tInt(), "epoch": tInt(), "revoked_at": ts(), "enforced": typ("boolean")})), "meta": ref("ListMeta")}),
		"ContextPreviewProofResponse":              dataOf(object(nil, schema{"id": tString(), "proposal_id": tString(), "vault_id": tString(), "candidate_digest": tString(), "base_seq": tInt(), "device_id": tString(), "issued_at": ts(), "mac": described(tString(), "HMAC-SHA256 of the proof by the server.")})),
		"ContextProposal":                          proposal,
		"ContextProposalResponse":                  dataOf(ref("ContextProposal")),
		"ContextProposalCollectionResponse":        listOf("ContextProposal"),
		"ContextBackup":                            object(nil, schema{"device_id": tString(), "user_id": tInt(), "sealed": tString(), "generation": tInt(), "created_at": ts()}),
		"ContextBackupResponse":                    dataOf(ref("ContextBackup")),
		"ContextBackupCollectionResponse":          listOf("ContextBackup"),
		"ContextDescriptor":                        descriptor,
		"ContextSourceIndexResponse":               dataOf(object(nil, schema{"context_source_id": tString(), "kind": tString(), "head_seq": tInt(), "epoch": tInt(), "entries": tInt(), "conflicts": tInt(), "descriptors": arrayOf(ref("ContextDescriptor"))})),
		"AgentSessionContextWorkingSetResponse":    dataOf(object([]string{"session_id", "context_source_ids", "entries"}, schema{"session_id": tString(), "task": tString(), "context_source_ids": arrayOf(tString()), "entries": arrayOf(ref("ContextDescriptor")), "composed_at": ts()})),
		"AgentSessionMemoryRetrievalResponse":      object([]string{"data"}, schema{"data": object([]string{"query", "results"}, schema{"query": tString(), "context_source_ids": arrayOf(tString()), "results": arrayOf(ref("ContextDescriptor"))}), "meta": ref("ListMeta")}),
		"AgentSessionContextCorrectionResponse":    dataOf(ref("ContextProposal")),
	}
}
