from jurygraph.cli.app import console_main

console_main()
