from dgvm.cli import main

main()
