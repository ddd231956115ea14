started="2026-12-03 16:28:04 UTC"
elapsed="1654"
commit="64ae5fe"
COUNT="6" BENCHTIME="4s" BENCH="."
