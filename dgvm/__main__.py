from dgvm.deploy.cli import main

main()
