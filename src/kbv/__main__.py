from kbv.cli import main

main()
