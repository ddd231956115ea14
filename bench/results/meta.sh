started="2026-11-30 09:48:26 UTC"
elapsed="873"
commit="ac6a215"
COUNT="5" BENCHTIME="4s" BENCH="."
