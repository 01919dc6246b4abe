"""Keys, DSSE attestations, the append-only ledger, approvals, waivers and audits."""
