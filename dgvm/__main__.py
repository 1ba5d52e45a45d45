from dgvm.cli.main import main

main()
