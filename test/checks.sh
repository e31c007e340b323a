# Counted checks for the test scripts that source this file
# (test/version.sh, test/layers.sh, test/package_python.sh,
# test/package_node.sh): each
# check prints "ok" or "FAILED" and a line; finish prints the
# "N passed, N failed" line test/clients.sh counts by.

passed=0
failed=0

ok() {
	echo "ok     $1"
	passed=$((passed + 1))
}

fail() {
	echo "FAILED $1"
	failed=$((failed + 1))
}

# check WHAT COMMAND...: one counted check, passed when COMMAND succeeds.
check() {
	local what=$1
	shift
	if "$@"; then ok "$what"; else fail "$what"; fi
}

# finish: the closing count, and the exit status of the script.
finish() {
	echo "$passed passed, $failed failed"
	[ "$failed" -eq 0 ]
}
