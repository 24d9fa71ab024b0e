module gpuportal/bench/loadgen

go 1.26
