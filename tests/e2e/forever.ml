(* forever.ml — e2e program: computes in [serve] until killed, like a server
   stopped with Ctrl-C. Build: ocamlopt forever.ml. Usage: forever.exe *)

let[@inline never] rec fib n = if n < 2 then n else fib (n - 1) + fib (n - 2)

let[@inline never] serve () =
  let total = ref 0 in
  while true do
    total := !total + fib 24
  done

let () = serve ()
