package bpf

//go:generate go tool bpf2go -cc clang-14 -strip llvm-strip -cflags "-O2 -g -Wall -Werror -mcpu=v3" -target bpfel Steer steer.c -- -I/usr/include/x86_64-linux-gnu
