started="2026-12-03 23:06:29 UTC"
elapsed="1625"
commit="d7ea017"
COUNT="6" BENCHTIME="4s" BENCH="."
