import torch
torch.manual_seed(0)
T,D,H=4096,768,3072
x=torch.randn(T,D); x=x/x.pow(2).mean(1,keepdim=True).sqrt()
w_in=torch.randn(H,D)/D**0.5; w_out=torch.randn(H,D)/D**0.5
g=torch.randn(T,D)*torch.rand(T,1)**3
pre=x@w_in.T; post=pre.relu()**2
d_pre=(g@w_out.T)*2*pre.relu()
amax=d_pre.abs().max()
rows=post.amax(1)
bound=(g.norm(dim=1)*rows.sqrt()).max()*w_out.norm(dim=1).max()*2
print('looseness', (bound/amax).item())
ref=(d_pre.double().T@x.double())
for L in (1,4,16,64,256,1024):
    s=amax*L/448
    q=(d_pre/s).clamp(-448,448).to(torch.float8_e4m3fn).float()*s
    xq=(x*16).to(torch.float8_e4m3fn).float()/16
    e=((q.double().T@xq.double())-ref).norm()/ref.norm()
    print(L, e.item())
qb=d_pre.bfloat16().float()
print('bf16', ((qb.double().T@x.bfloat16().double())-ref).norm().item()/ref.norm().item())
