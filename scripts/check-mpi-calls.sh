#!/usr/bin/env bash
# scripts/check-mpi-calls.sh [SRCDIR]: every MPI call in the library's sources (src/*.c,
# src/*.h) has its return code checked: the call must be the first argument of
# PC_MPI_CHECK or PC_MPI_CHECK_PEER (include/pipecompress/pc_comm.h). The one exception is
# MPI_Error_string inside pc_comm_check_peer, which is how a failure is described (its own
# failure is handled there). Lists each unchecked call as FILE:LINE: CALL and exits 1 if
# there is any; prints where MPI is called, file by file, otherwise. Comments and strings
# are ignored. Run by scripts/check.sh before the builds.
set -euo pipefail
top=${1:-$(cd "$(dirname "$0")/.." && pwd)}
perl -e '
    my ($bad, %where) = (0);
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
                  || ($call eq "MPI_Error_string" && $f =~ m{src/pc_comm\.c$});
            (my $short = $f) =~ s{.*/src/}{src/};
            if ($ok) { $where{$short}++ } else { print "$short:$line: $call not checked\n"; $bad++ }
        }
    }
    if ($bad) { print "check-mpi-calls: $bad MPI call(s) without PC_MPI_CHECK\n"; exit 1 }
    print "check-mpi-calls: every MPI call checked (", join(", ", map { "$_ $where{$_}" } sort keys %where), ")\n";
' "$top"/src/*.c "$top"/src/*.h
