from onnxgate.cli import main

main()
