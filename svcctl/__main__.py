from svcctl.cli import main

raise SystemExit(main())
