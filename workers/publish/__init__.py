"""Publishing a passing run on GitHub while others act on the same branch and issue.

- `pull.py`: a first run force-pushes `frognano/issue-N` and opens (or updates) its one
  draft PR (`publish_pull`).
- `review.py`: a review run (changes requested, or a `/frognano` comment on the bot's PR)
  started from the PR branch's head; its change goes on top of that head without force,
  then the reply and the PR body's test report (`publish_review`).
- `shared.py`: what both do: the last check before a push (`refuse_unsafe`), staleness
  before every push try (`Stopped`), the push's retry policy, the careful-review label
  and the status once published.

- `api_commit.py`: the commit made on GitHub through its Git Data API from the snapshot's
  tree in the run's host-owned git directory (`solver/hostgit.py`), so GitHub signs it
  (docs/VERIFIED_COMMITS.md); a push is then a ref write, never a git push. The
  workspace and its `.git` are never read here.

Two races are settled here:

- **The branch moved** (a human pushed during a review run): the change is replayed on
  the new head and the merged tree goes through the run's own verdict again
  (`RunOutcome.replay()`, solver/replay.py: in sandboxes from the run's own recipe, its
  test services included), so what is pushed is what was tested. Which tests count: the
  new head's, as it is. After a replay the base *is* the new head, human commits
  included, so a human's edits to tests or test configuration are trusted and run as
  they are there; the model's edits to them are put back to the new head's version
  (they are run apart, as the model's own tests, exactly as in the run). The baseline
  for the per-test comparison is the new head's own test run.
- **A cancel during publishing** (both kinds of run): staleness is checked right before
  every push try (`current`); a cancel before one pushes nothing and ends as
  `cancelled`. Once GitHub has accepted a push the cancel is too late for it: the PR
  steps still finish (never a pushed branch without its PR, reply and report) and the
  status comment says the cancel arrived after the push, and who cancelled.
"""
