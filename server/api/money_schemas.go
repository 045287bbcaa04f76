package api

// Schemas of the ledger, provider keys and billing (server/sdk/money.go
// and billing.go are their Go shapes).

var usdPattern = schema{"type": "string", "pattern": `^[0-9]+(\.[0-9]{1,9})?$`}

// budgetPolicySchema is a workspace's budget_policy: checked again by
// store.ParseBudgetPolicy, which names the field of a 422.
func budgetPolicySchema() schema {
	return described(schema{"type": []any{"object", "null"}, "additionalProperties": false, "properties": schema{
		"hard_cap_usd":     described(schema{"anyOf": []any{usdPattern, schema{"type": "number", "minimum": 0}, schema{"type": "null"}}}, "The most the gateway ledger may record in one period, in USD: a decimal string (\"25.00\") or a number; at most 9 decimal places. null or absent: no cap."),
		"period":           described(enum("monthly", "daily"), "The cap's period (UTC calendar month or day); default monthly."),
		"billing_active":   described(typ("boolean", "null"), "false stops all billable use (402 billing_inactive)."),
		"warn_at_fraction": described(schema{"type": "number", "minimum": 0, "maximum": 1}, "The fraction of the cap at which the workspace is warned."),
	}}, "Budget policy; unknown members are refused (422).")
}

func ledgerEntrySchema() schema {
	return object([]string{"id", "seq", "workspace_id", "period", "idempotency_key", "cost_usd", "finalized_at", "replayed"}, schema{
		"id": tString(), "seq": tInt(), "workspace_id": tString(), "period": described(tString(), "YYYY-MM"), "idempotency_key": tString(),
		"cost_usd": usdPattern, "gateway_virtual_key_id": tString(), "run_id": tString(), "lease_id": tString(), "team_ref": tStringNull(),
		"provider": tString(), "model": tString(), "input_tokens": tInt(), "output_tokens": tInt(), "total_tokens": tInt(),
		"latency_ms": tIntNull(), "status": tStringNull(), "error_code": tStringNull(), "occurred_at": tStringNull(),
		"finalized_at": schema{"type": "string", "format": "date-time"}, "recorded_by": tString(),
		"replayed": described(typ("boolean"), "true on the 200 answer to a repeated idempotency_key"),
	})
}

func budgetStatusSchema() schema {
	return object([]string{"period", "spent_usd", "admitted"}, schema{
		"period": tString(), "hard_cap_usd": typ("string", "null"), "spent_usd": tString(), "remaining_usd": typ("string", "null"),
		"admitted": typ("boolean"), "reason": enum("billing_inactive", "hard_cap_exceeded", "budget_policy_invalid"),
	})
}

func providerKeySchema() schema {
	return object([]string{"id", "workspace_id", "provider", "mode", "has_secret", "version", "created_at", "updated_at"}, schema{
		"id": tString(), "workspace_id": tString(), "provider": enum("provider_a", "provider_b", "provider_c", "other"),
		"mode": enum("managed_byok", "managed_pass_through"), "team_id": tIntNull(), "key_ref": tStringNull(),
		"has_secret":  typ("boolean"),
		"fingerprint": described(tString(), "A keyed MAC of the secret (hmac-sha256:...), never a hash of it."),
		"version":     tInt(), "created_by": tString(),
		"created_at": schema{"type": "string", "format": "date-time"}, "updated_at": schema{"type": "string", "format": "date-time"},
		"rotated_at": typ("string", "null"),
	})
}

func billingAccountSchema() schema {
	return object([]string{"provider", "status", "has_customer"}, schema{
		"provider": enum("payments", "manual"), "status": enum("none", "active", "past_due", "canceled"),
		"has_customer": typ("boolean"), "reconciled_at": typ("string", "null"),
	})
}

func billingInvoiceSchema() schema {
	return object([]string{"id", "status", "currency", "amount_due", "amount_paid", "created_at"}, schema{
		"id": tString(), "number": tString(), "status": tString(), "currency": tString(),
		"amount_due": described(tInt(), "cents"), "amount_paid": described(tInt(), "cents"),
		"period_start": typ("string", "null"), "period_end": typ("string", "null"), "created_at": tString(),
		"usage_usd": described(tString(), "The ledger total behind a manual statement."),
	})
}

func billingRedirectResponse() schema {
	return object([]string{"data"}, schema{"data": object([]string{"redirect_url", "provider", "status"}, schema{
		"redirect_url": described(tString(), "Where to send the browser; the provider's session itself is never returned."),
		"provider":     enum("payments", "manual"), "status": tString(),
	})})
}

func moneyResponseSchemas() map[string]schema {
	return map[string]schema{
		"BillingCheckoutSessionResponse": billingRedirectResponse(),
		"BillingPortalSessionResponse":   billingRedirectResponse(),
		"BillingCustomerReconciliationResponse": object([]string{"data"}, schema{"data": object([]string{"reconciled", "source", "account"}, schema{
			"reconciled": typ("boolean"), "source": enum("recorded", "provider", "none"), "account": billingAccountSchema(), "invoices": tInt(),
		})}),
		"BillingInvoiceCollectionResponse":     object([]string{"data", "meta"}, schema{"data": arrayOf(billingInvoiceSchema()), "meta": ref("ListMeta")}),
		"BillingInvoiceReconciliationResponse": object([]string{"data"}, schema{"data": billingInvoiceSchema()}),
		"BillingPaymentMethodResponse": object([]string{"data"}, schema{"data": object([]string{"brand", "last4"}, schema{
			"brand": typ("string", "null"), "last4": typ("string", "null"),
		})}),
		"BillingPricingCatalogResponse": object([]string{"data"}, schema{"data": object([]string{"billing_mode", "billable_unit", "currency", "pass_through_providers"}, schema{
			"billing_mode": enum("subscription_with_usage", "manual"), "billable_unit": tString(), "currency": tString(),
			"pass_through_providers": arrayOf(tString()),
		})}),
		"BillingSummaryResponse": object([]string{"data"}, schema{"data": object([]string{"period_start", "period_end", "total_usd", "entries", "budget", "account"}, schema{
			"period_start": tString(), "period_end": tString(), "total_usd": tString(), "entries": tInt(),
			"input_tokens": tInt(), "output_tokens": tInt(), "by_model": schema{"type": "object", "additionalProperties": tString()},
			"budget": budgetStatusSchema(), "account": billingAccountSchema(),
		})}),
		"PaymentWebhookStatusResponse": object([]string{"data"}, schema{"data": object([]string{"provider", "configured", "endpoint", "received", "duplicates", "by_outcome"}, schema{
			"provider": enum("payments", "manual"), "configured": typ("boolean"), "endpoint": tString(), "tolerance_seconds": tInt(),
			"received": tInt(), "duplicates": tInt(), "by_outcome": schema{"type": "object", "additionalProperties": tInt()},
			"last_received_at": typ("string", "null"),
		})}),
		"ProviderKeyResponse":           object([]string{"data"}, schema{"data": providerKeySchema()}),
		"ProviderKeyCollectionResponse": object([]string{"data", "meta"}, schema{"data": arrayOf(providerKeySchema()), "meta": ref("ListMeta")}),
		"ProviderKeyMaterialResponse": object([]string{"data"}, schema{"data": object([]string{"provider_key_id", "provider", "mode", "version", "fingerprint", "secret"}, schema{
			"provider_key_id": tString(), "provider": tString(), "mode": tString(), "version": tInt(), "fingerprint": tString(),
			"secret": described(tString(), "The key's secret: the one answer that carries it."),
		})}),
		"GatewayUsageRecordResponse": object([]string{"data"}, schema{"data": ledgerEntrySchema()}),
		"GatewayLedgerResponse": object([]string{"data", "meta"}, schema{"data": object([]string{"entries", "periods", "budget"}, schema{
			"entries": arrayOf(ledgerEntrySchema()),
			"periods": arrayOf(object([]string{"period", "kind", "total_usd", "entries"}, schema{"period": tString(), "kind": enum("monthly", "daily"), "total_usd": tString(), "entries": tInt()})),
			"budget":  budgetStatusSchema(),
		}), "meta": ref("ListMeta")}),
	}
}
