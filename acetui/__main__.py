from acetui import main

main()
