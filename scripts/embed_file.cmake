# embed_file.cmake: writes the bytes of IN as a C array NAME (and NAME_len) into OUT, so a file ships inside
# the binary. cmake -DIN=file -DOUT=file.c -DNAME=symbol -P embed_file.cmake
file(READ ${IN} hex HEX)
string(LENGTH "${hex}" n_hex)
math(EXPR n "${n_hex} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "((0x..,){16})" "\\1\n" bytes "${bytes}")
file(WRITE ${OUT}.tmp "/* Generated from ${IN} by scripts/embed_file.cmake. */\n#include <stddef.h>\n"
     "const unsigned char ${NAME}[] = {\n${bytes}0x00};\nconst size_t ${NAME}_len = ${n};\n")
file(RENAME ${OUT}.tmp ${OUT})
