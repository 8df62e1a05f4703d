from stratamem.cli.main import main

main()
