started="2026-11-30 14:28:47 UTC"
elapsed="1265"
commit="83e424b"
COUNT="6" BENCHTIME="4s" BENCH="."
