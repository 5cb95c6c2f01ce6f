from lrtune.cli import main

raise SystemExit(main())
