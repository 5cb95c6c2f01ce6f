from lrtune.entry import main

raise SystemExit(main())
