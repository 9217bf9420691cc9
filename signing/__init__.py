"""The authority's signing keys: the key this server signs with and its signer (a key
file or a PKCS#11 token), the roots and key certificates devices chain to, and the
registered keys (install, retire; revoking one is a revocation-list event, so it is
``licensing.services.signing_key_revoke``)."""
