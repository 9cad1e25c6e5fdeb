#!/usr/bin/env bash
# Recompresses the dashboard's assets into their checked-in .gz twins (served to browsers that
# accept gzip; `cargo test -p apiserver --lib dashboard` checks they are current).
# -n: no name or timestamp in the header, so the output depends only on the input.
set -euo pipefail
cd "$(dirname "$0")/assets"
for f in index.html app.js style.css; do
  gzip -9 -n -c "$f" >"$f.gz"
done
