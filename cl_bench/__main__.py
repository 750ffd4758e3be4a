from cl_bench.commands.cli import main

main()
