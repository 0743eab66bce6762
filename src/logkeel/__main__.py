from logkeel.cli.main import main

main()
