started="2026-11-30 11:02:55 UTC"
elapsed="874"
commit="8042f7b"
COUNT="5" BENCHTIME="4s" BENCH="."
