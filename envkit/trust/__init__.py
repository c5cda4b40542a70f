"""Trust: keys, signatures in cosign's layout, in-toto attestations in DSSE envelopes, and their verification."""
