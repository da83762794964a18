from dragonlab.cli import main

raise SystemExit(main())
