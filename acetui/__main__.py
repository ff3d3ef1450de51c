from acetui.cli import main

main()
