from trainaudit.cli import main

main()
