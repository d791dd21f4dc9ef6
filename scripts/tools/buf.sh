#!/usr/bin/env bash
# Guard proto/ (the public API) with buf: `buf lint` with buf.yaml's rules, then `buf breaking`
# against an earlier commit. Run by `make lint`.
#
# What `buf breaking` compares with (a git commit of this repository, read from .git):
#   * BUF_AGAINST, when set (any git ref: a release tag, origin/main, a commit);
#   * else, on main's tip (CI's clean clone of main): HEAD's first parent, i.e. main before the
#     commit or merge being checked;
#   * else (a branch): the merge base with main, i.e. what the branch changes.
# A repository without such a commit (its first commit, a shallow clone) says so and checks
# lint only. buf itself comes once per version from scripts/tools/go-tool.sh
# (~/.cache/headwater-tools): Buf's release binary from npm on Linux (~30 s), else built from the
# Go module proxy (about 8 min of one core at nice 19 on a loaded machine); seconds when cached.
set -euo pipefail
cd "$(dirname "$0")/../.."

buf="$(bash scripts/tools/go-tool.sh buf)"
"$buf" lint

against="${BUF_AGAINST:-}"
if [ -z "$against" ]; then
  head="$(git rev-parse HEAD)"
  main="$(git rev-parse --verify -q main || true)"
  if [ -z "$main" ] || [ "$main" = "$head" ]; then
    against="$(git rev-parse --verify -q 'HEAD^1' || true)"
  else
    against="$(git merge-base HEAD "$main" || true)"
  fi
fi
if [ -z "$against" ]; then
  echo "buf.sh: no earlier commit to compare proto/ with (first commit or shallow clone):" \
    "buf breaking not run; set BUF_AGAINST to a ref" >&2
  exit 0
fi
commit="$(git rev-parse --verify "$against^{commit}")"
if ! git cat-file -e "$commit:proto" 2>/dev/null; then
  echo "buf.sh: $against has no proto/: nothing to compare with" >&2
  exit 0
fi
echo "buf breaking against $against ($commit)"
"$buf" breaking --against ".git#ref=$commit,subdir=proto"
