from hyperqwen_patches.cli import main

main()
