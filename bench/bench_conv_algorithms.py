"""CPU convolution algorithms on ResNet-50 layers: each algorithm vs the heuristic's choice
vs the benchmarked choice, as ratios to the best measured in the same run.

    python bench/bench_conv_algorithms.py [--quick] [--json FILE]
"""
import sys

from hipdnn_async._bench import main

if __name__ == "__main__":
    sys.exit(main())
