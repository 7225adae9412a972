from bot.app.cli import main

raise SystemExit(main())
