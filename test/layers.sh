#!/usr/bin/env bash
#
# layers.sh: checks that src/ keeps the layering src/README.md declares.
#
#     bash test/layers.sh              (from the top of the tree, as root or not)
#     bash test/layers.sh --self-test  (shows the check can fail)
#
# src/README.md has a table, between "<!-- layers -->" markers, of the
# folders of src/ with a rank each: a file may call, and #include, only
# files of its own folder or of a folder ranked lower.  The objects say who
# calls whom: nm lists what each object defines and what it needs from
# elsewhere, so a call from a lower folder into a higher one is a symbol an
# object of the lower folder needs and one of the higher folder defines.
# nm cannot see macros, static inline functions and types; #include lines
# can, so those are checked too, and so is where each header's extern
# declarations are defined.  Also: no C file or header sits in src/
# itself or in a folder the table does not name, the Makefile builds every
# C file, and no file is over 800 lines.  Cycles inside one folder are
# allowed; tsort prints them for information.
#
# --self-test runs the call and #include checks with two ranks swapped
# (storage above leases), where they must find calls and includes going
# up; if they do not, the checks themselves are broken.
#
set -uo pipefail

cd "$(dirname "$0")/.."
. test/checks.sh

MAX_LINES=800
table=src/README.md
self_test=false
[ "${1:-}" = --self-test ] && self_test=true

# rank[folder], from the table's first two columns.
declare -A rank=()
layer_table() {
	awk -F'|' '/<!-- layers -->/ {on = 1; next}
		/<!-- \/layers -->/ {on = 0}
		on && $2 ~ /^ *[0-9]+ *$/ {gsub(/ /, "", $2); gsub(/ /, "", $3); print $3, $2}' "$table"
}
read_table() {
	local folder r
	while read -r folder r; do
		if [ -n "${rank[$folder]:-}" ]; then
			echo "  $table names $folder twice"
			return 1
		fi
		rank[$folder]=$r
	done < <(layer_table)
	[ "${#rank[@]}" -gt 0 ] || { echo "  no layer table in $table"; return 1; }
}

# Every C file and header is in a folder the table names.
folders_known() {
	local bad=0 f dir
	for f in src/*.[ch]; do
		[ -e "$f" ] || continue
		echo "  $f is in src/ itself, not in a layer folder"
		bad=1
	done
	for dir in src/*/; do
		dir=${dir%/}
		dir=${dir#src/}
		if [ -z "${rank[$dir]:-}" ]; then
			echo "  src/$dir is not in the layer table of $table"
			bad=1
		fi
	done
	return $bad
}

# The Makefile's OBJS are exactly the C files under src/.
makefile_objects() {
	local listed found
	listed=$(make -s --no-print-directory -f Makefile \
		-f <(printf 'dsync-layers-objs:\n\t@echo $(OBJS)\n') dsync-layers-objs |
		tr ' ' '\n' | grep -v '^$' | sort)
	found=$(ls src/*/*.c | sed 's/\.c$/.o/' | sort)
	if [ "$listed" != "$found" ]; then
		diff <(echo "$listed") <(echo "$found") | sed 's/^/  /'
		echo "  (< in the Makefile's OBJS only, > a C file the Makefile does not build)"
		return 1
	fi
}

# The objects are current: make rebuilds what changed, headers included
# (the compiler recorded which each object uses), and does nothing else.
objects_current() {
	make -s COPT=-Werror >/dev/null
}

# owner[symbol]: the object (folder/file.o) that defines it.
declare -A owner=()
load_owners() {
	local o sym file
	for o in src/*/*.o; do
		while read -r sym file; do
			owner[$sym]=$file
		done < <(nm --defined-only "$o" | awk -v o="${o#src/}" '$2 ~ /^[TDBRGSVW]$/ {print $3, o}')
	done
}

# folder_of PATH: the layer folder of src/FOLDER/FILE or FOLDER/FILE.
folder_of() {
	local p=${1#src/}
	echo "${p%%/*}"
}

# Calls going up: prints "caller -> callee: symbol" for each, and where in
# the caller's source the symbol is used.  Fails if there is any.
calls_up() {
	local -n ranks=$1
	local o caller callee sym n=0 cf ef
	for o in src/*/*.o; do
		caller=${o#src/}
		cf=$(folder_of "$o")
		while read -r sym; do
			callee=${owner[$sym]:-}
			[ -n "$callee" ] || continue
			ef=$(folder_of "$callee")
			if [ "${ranks[$ef]}" -gt "${ranks[$cf]}" ]; then
				echo "  LAYER $caller -> $callee: $sym"
				grep -n -w -- "$sym" "${o%.o}.c" | head -3 | sed 's/^/      /'
				n=$((n + 1))
			fi
		done < <(nm --undefined-only "$o" | awk '{print $NF}')
	done
	[ "$n" -eq 0 ]
}

# Includes going up: a dsync header of a higher folder.
includes_up() {
	local -n ranks=$1
	local f h target n=0 ff
	for f in src/*/*.[ch]; do
		ff=$(folder_of "$f")
		while read -r h; do
			target=$(ls src/*/"$h" 2>/dev/null | head -1)
			[ -n "$target" ] || continue
			if [ "${ranks[$(folder_of "$target")]}" -gt "${ranks[$ff]}" ]; then
				echo "  LAYER $f includes $target"
				n=$((n + 1))
			fi
		done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
	done
	[ "$n" -eq 0 ]
}

# A header declares only what its own folder defines, so that a header
# belongs to its layer as a C file does: including a lower folder's header
# must never give access to a higher folder's function.
declarations_home() {
	local sym o h hf n=0
	for h in src/*/*.h; do
		hf=$(folder_of "$h")
		while read -r sym; do
			o=${owner[$sym]:-}
			if [ -n "$o" ] && [ "$(folder_of "$o")" != "$hf" ]; then
				echo "  $h declares $sym, defined in src/$o"
				n=$((n + 1))
			fi
		done < <(sed -n 's/^extern[^(]*[[:space:]*]\([A-Za-z_][A-Za-z0-9_]*\)(.*/\1/p; s/^extern[^(;]*[[:space:]*]\([A-Za-z_][A-Za-z0-9_]*\)\(\[[^]]*\]\)*;.*/\1/p' "$h")
	done
	[ "$n" -eq 0 ]
}

# No file over MAX_LINES lines.
file_sizes() {
	local bad
	bad=$(wc -l src/*/*.[ch] | awk -v max=$MAX_LINES '$2 != "total" && $1 > max {print "  " $2 ": " $1 " lines"}')
	[ -z "$bad" ] || { echo "$bad"; return 1; }
}

# Cycles between files, for information only: tsort names one loop at a
# time on stderr (a file may be in several; tsort breaks each loop it finds).
print_cycles() {
	local o sym callee
	for o in src/*/*.o; do
		nm --undefined-only "$o" | awk '{print $NF}' | while read -r sym; do
			callee=${owner[$sym]:-}
			[ -n "$callee" ] && [ "$callee" != "${o#src/}" ] && echo "${o#src/} $callee"
		done
	done | sort -u | tsort 2>&1 >/dev/null |
		awk '/input contains a loop/ {if (c != "") print "  cycle:" c; c = ""; next}
			{sub(/^tsort: /, ""); c = c " " $0}
			END {if (c != "") print "  cycle:" c}'
}

if ! read_table; then
	fail "the layer table in $table"
	finish
	exit 1
fi
if ! objects_current; then
	fail "dsync builds"
	finish
	exit 1
fi

load_owners

if $self_test; then
	declare -A swapped=()
	for f in "${!rank[@]}"; do swapped[$f]=${rank[$f]}; done
	swapped[storage]=${rank[leases]}
	swapped[leases]=${rank[storage]}
	out=$(calls_up swapped)
	status=$?
	echo "$out" | head -5
	check "with storage and leases swapped, calls go up ($(echo "$out" | grep -c LAYER) found)" \
		test "$status" -ne 0 -a -n "$out"
	out=$(includes_up swapped)
	status=$?
	echo "$out" | head -3
	check "with storage and leases swapped, #includes go up ($(echo "$out" | grep -c LAYER) found)" \
		test "$status" -ne 0 -a -n "$out"
	finish
	exit
fi

echo "layers (rank: folder): $(for f in "${!rank[@]}"; do echo "${rank[$f]}:$f"; done | sort -n | tr '\n' ' ')"
check "every C file and header is in a folder of the layer table" folders_known
check "the Makefile builds every C file under src/" makefile_objects
check "no call goes from a lower layer to a higher one (nm)" calls_up rank
check "no #include goes from a lower layer to a higher one" includes_up rank
check "every header declares only what its own folder defines" declarations_home
check "no file under src/ is over $MAX_LINES lines" file_sizes
cycles=$(print_cycles)
if [ -n "$cycles" ]; then
	echo "files in call cycles (allowed within a folder):"
	echo "$cycles"
fi
finish
