from cl_bench.cli import main

main()
