#!/usr/bin/env bash
# Usage: tools/install_stubs.sh SITE_DIR [STUBS_DIR]
# Copy the import-time stubs (default: tools/stubs/, a tree laid out like site-packages) into
# SITE_DIR, the folder holding the installed packages; a file already there is kept, so a real
# module is never replaced. The stubs and why each exists: tools/stubs/README.md.
set -euo pipefail
usage() { sed -n '2,5s/^# \{0,1\}//p' "$0"; }
case ${1:-} in
    -h|--help) usage; exit 0 ;;
    '') usage >&2; exit 2 ;;
esac
SITE=$1
STUBS=${2:-$(cd "$(dirname "$0")" && pwd)/stubs}
cd "$STUBS"
find . -type f ! -name README.md | while read -r file; do
    [ -e "$SITE/$file" ] || install -D -m 644 "$file" "$SITE/$file"
done
