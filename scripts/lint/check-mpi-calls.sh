#!/usr/bin/env bash
# scripts/lint/check-mpi-calls.sh [SRCDIR]: every MPI call in the library's sources (every .c
# and .h under src/, in every folder) has its return code checked: the call must be the first argument of
# PC_MPI_CHECK or PC_MPI_CHECK_PEER (include/pipecompress/pc_comm.h). The one exception is
# MPI_Error_string inside pc_comm_check_peer, which is how a failure is described (its own
# failure is handled there). Lists each unchecked call as FILE:LINE: CALL and exits 1 if
# there is any; prints where MPI is called, file by file, otherwise. Comments and strings
# are ignored. It also fails when a file calls MPI that scripts/lint/layers.txt's `mpi`
# lines do not name, or when a file they name calls none (the list says where MPI is;
# this keeps it true). Programs in apps/ are not scanned: they use MPI_COMM_WORLD with
# MPI's default handler, MPI_ERRORS_ARE_FATAL, so an MPI error there ends the job with
# MPI's own message (a program that sets MPI_ERRORS_RETURN checks its calls itself, as
# pc-bench topo does).
# Run by scripts/check.sh before the builds.
set -euo pipefail
top=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
list=scripts/lint/layers.txt
[ -r "$top/$list" ] || { echo "check-mpi-calls: $list: cannot read" >&2; exit 1; }
# The words after "mpi" on each mpi line (check-layers.py checks the file's syntax).
allowed=$(perl -lane 'print join(" ", @F[1 .. $#F]) if @F && $F[0] eq "mpi"' "$top/$list")
[ -n "$allowed" ] || { echo "check-mpi-calls: $list has no 'mpi FILE...' line" >&2; exit 1; }
PC_MPI_FILES="$allowed" PC_MPI_LIST="$list" perl -e '
    my ($bad, %where) = (0);
    my %allowed = map { $_ => 1 } split(" ", $ENV{PC_MPI_FILES});
    my (%told, %seen);
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
            $seen{$short} = 1;
            if (!$allowed{$short} && !$told{$short}++) {
                print "$short: calls MPI but $ENV{PC_MPI_LIST} does not list it on an mpi line\n";
                $bad++;
            }
        }
    }
    for my $f (sort keys %allowed) {
        next if $seen{$f};
        print "$f: listed on an mpi line of $ENV{PC_MPI_LIST} but calls no MPI\n";
        $bad++;
    }
    if ($bad) { print "check-mpi-calls: $bad problem(s): MPI calls without PC_MPI_CHECK, or a list in $ENV{PC_MPI_LIST} that is not where MPI is\n"; exit 1 }
    print "check-mpi-calls: every MPI call checked (", join(", ", map { "$_ $where{$_}" } sort keys %where), ")\n";
' $(find "$top/src" -name '*.[ch]' | sort)
