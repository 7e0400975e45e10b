#!/usr/bin/env bash
# scripts/lint/check-mpi-calls.sh [SRCDIR]: every MPI call in the library's sources (every .c
# and .h under src/, in every folder) has its return code checked: the call must be the first argument of
# PC_MPI_CHECK or PC_MPI_CHECK_PEER (include/pipecompress/pc_comm.h). The one exception is
# MPI_Error_string inside pc_comm_check_peer, which is how a failure is described (its own
# failure is handled there). Lists each unchecked call as FILE:LINE: CALL and exits 1 if
# there is any; prints where MPI is called, file by file, otherwise. Comments and strings
# are ignored. It also fails when a file calls MPI that doc/design.md's sentence "MPI is
# called in ..." does not name (the doc says where MPI is; this keeps it true). Programs
# in apps/ are not scanned: they use MPI_COMM_WORLD with MPI's default handler,
# MPI_ERRORS_ARE_FATAL, so an MPI error there ends the job with MPI's own message (a
# program that sets MPI_ERRORS_RETURN checks its calls itself, as pc-bench topo does).
# Run by scripts/check.sh before the builds.
set -euo pipefail
top=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
allowed=$(perl -0ne 'print join(" ", $1 =~ /`([\w.]+\.c)`/g) if /MPI is called in (.*?)nowhere/s' "$top/doc/design.md")
[ -n "$allowed" ] || { echo "check-mpi-calls: doc/design.md has no 'MPI is called in ...' list" >&2; exit 1; }
PC_MPI_FILES="$allowed" perl -e '
    my ($bad, %where) = (0);
    my %allowed = map { $_ => 1 } split(" ", $ENV{PC_MPI_FILES});
    my %told;
    for my $f (@ARGV) {
        open(my $fh, "<", $f) or die "$f: $!";
        local $/; my $src = <$fh>;
        # Blank out comments and string literals, keeping newlines (line numbers).
        $src =~ s{(/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\])*")}{ (my $x = $1) =~ s/[^\n]/ /g; $x }gse;
        while ($src =~ /\b(MPI_[A-Z][a-z_]+)\s*\(/g) {
            my ($call, $at) = ($1, $-[0]);
            my $line = 1 + (substr($src, 0, $at) =~ tr/\n//);
            my $before = substr($src, 0, $at);
            my $ok = $before =~ /PC_MPI_CHECK(?:_PEER)?\s*\(\s*$/
                  || ($call eq "MPI_Error_string" && $f =~ m{/pc_comm\.c$});
            (my $short = $f) =~ s{.*/src/}{src/};
            if ($ok) { $where{$short}++ } else { print "$short:$line: $call not checked\n"; $bad++ }
            (my $base = $short) =~ s{.*/}{};
            if (!$allowed{$base} && !$told{$base}++) {
                print "$short: calls MPI but doc/design.md does not list it under \"MPI is called in\"\n";
                $bad++;
            }
        }
    }
    if ($bad) { print "check-mpi-calls: $bad problem(s): MPI calls without PC_MPI_CHECK, or in files doc/design.md does not list\n"; exit 1 }
    print "check-mpi-calls: every MPI call checked (", join(", ", map { "$_ $where{$_}" } sort keys %where), ")\n";
' $(find "$top/src" -name '*.[ch]' | sort)
