#!/usr/bin/env bash
# Every shell script in the tree parses (bash -n): the GPU machine's scripts
# run nowhere else before a device call, where a syntax error costs minutes.
# usage: check_scripts.sh SOURCE_DIR
set -u
cd "${1:?usage: check_scripts.sh SOURCE_DIR}" || exit 2
rc=0 n=0
while IFS= read -r f; do
    n=$((n + 1))
    bash -n "$f" || { echo "FAIL: $f does not parse"; rc=1; }
done < <(git ls-files '*.sh' .ci/run 2>/dev/null || find . -name '*.sh' -not -path './build*')
[ "$n" -gt 0 ] || { echo "FAIL: no scripts found"; exit 1; }
echo "$n scripts parse"
exit $rc
