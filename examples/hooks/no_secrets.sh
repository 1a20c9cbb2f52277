#!/bin/sh
# A keel pre_tool hook: refuses writes to paths that contain "secret".
# keel sends the call as one line of JSON on stdin; the answer is one JSON object on stdout.
input=$(cat)
path=$(printf '%s\n' "$input" | sed -n 's/.*"path":"\([^"]*\)".*/\1/p')
case "$path" in
  *secret*) echo '{"decision": "deny", "reason": "paths containing \"secret\" are off limits"}' ;;
  *) echo '{"decision": "allow"}' ;;
esac
