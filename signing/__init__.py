"""The authority's signing keys: the key this server signs with and its signer (a key
file or a PKCS#11 token), the roots and key certificates devices chain to, and the
registered keys and their writes (``signing.services``: install, retire, revoke; the
revocation list a revoked key enters is licensing's, which registers its writes)."""
