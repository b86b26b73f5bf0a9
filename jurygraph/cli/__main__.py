from jurygraph.cli.app import main

raise SystemExit(main())
