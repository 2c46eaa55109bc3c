"""Privacy attacks on trained language models: canary exposure (exact by trie enumeration, or skew-normal
estimate, with its random-rank floor and an interval of the mean), membership inference on secrets, and the
one-run empirical lower bound on ε from inserted vs held-out canaries.

Modules: `exposure` (exact), `estimate`, `canaries` (a trial's canaries), `mia`, `audit` (the ε lower bound),
`candidates` (the secret space), `cli` (`sdp-sweep audit`). The package imports none of them, so the CLI's
`audit --help` starts without torch.

Results hold counts, ranks, exposures and rates, never secret values.
"""
