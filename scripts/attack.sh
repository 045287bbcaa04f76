#!/usr/bin/env bash
# The slower attack tests, on demand (not in .ci/run): each runs at full
# size with REEVE_ATTACK=1. See docs/attacks.md.
#
#   scripts/attack.sh            # all of them
#   scripts/attack.sh relay      # one group: relay, start, hook, disk
set -euo pipefail
cd "$(dirname "$0")/.."
export REEVE_ATTACK=1
only=${1:-all}

run() { # group package test-regexp
  if [ "$only" = all ] || [ "$only" = "$1" ]; then
    echo "== $1: $2 $3"
    go test "$2" -run "$3" -count=1 -v -timeout 30m | grep -E '^(=== RUN|--- |\s+\S+_test.go:|ok|FAIL|PASS)'
  fi
}

# Relay: 100 stalled peers each sent 10 MB (memory stays flat), a flooded
# client among fast ones (their p99), 70 KB and 2 MB frames.
run relay ./server/relay 'TestRelayMemoryBoundedUnderStalledPeers|TestRelaySlowClientDoesNotStallOthers|TestRelayOversizeFramesEndOnlyTheirChannel|TestRelaySlowPeerIsDisconnected'
run relay ./daemon/relaylink 'TestOversizeClientFramesLeaveTheLinkUp'
# Two starts racing for the home, 10 trials with and without --auth.
run start ./cmd/reeve 'TestRacingStartsRunTheWinnersSettings'
# A hook whose stdin never ends or trickles answers within its timeout.
run hook ./cli 'TestHookTimeoutCoversReadingStdin'
# The daemon home on a small tmpfs filled while a session writes (root).
run disk ./daemon/store 'TestDiskFullOnTmpfs'
run disk ./cmd/reeve 'TestDiskFullSessionEnds'
