started="2026-11-30 14:55:57 UTC"
elapsed="1283"
commit="2eeba81"
COUNT="6" BENCHTIME="4s" BENCH="."
