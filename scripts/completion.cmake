# Writes the bash completion script: cmake -DBIN=luagent -DOUT=file -P completion.cmake
execute_process(COMMAND ${BIN} completion bash OUTPUT_FILE ${OUT} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${BIN} completion bash failed (${rc})")
endif()
